package control

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

const stopTestID = "5b2c1e7a-aaaa-4bbb-8ccc-000000000036"

// deadRef is a process that ran and is gone: its pid and start time.
func deadRef(t *testing.T) proc.Ref {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read x")
	stdin, err := cmd.StdinPipe()
	testutil.NoErr(t, err)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := proc.StartTime(cmd.Process.Pid)
	stdin.Close()
	cmd.Wait()
	testutil.NoErr(t, err)
	return proc.Ref{PID: cmd.Process.Pid, Start: start}
}

// liveStandby is a process of this user in a session of its own, as a
// standby is, stopped and reaped at the end of the test.
func liveStandby(t *testing.T) (*exec.Cmd, proc.Ref) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	start, err := proc.StartTime(cmd.Process.Pid)
	testutil.NoErr(t, err)
	return cmd, proc.Ref{PID: cmd.Process.Pid, Start: start}
}

// plantKernel writes, into a fresh state directory, what a kernel that
// ended with its Slurm job leaves (#36): its record with a dead supervisor
// and kernel, its spare's record naming standby and spare, and the
// standby's socket. It returns the directory.
func plantKernel(t *testing.T, standby, spare proc.Ref) string {
	t.Helper()
	dir := testutil.PrivateDir(t)
	d, err := record.OpenDir(dir, false, false)
	testutil.NoErr(t, err)
	defer d.Close()
	sup, kernel := deadRef(t), deadRef(t)
	st := record.State{KernelID: stopTestID, SupervisorPID: sup.PID, SupervisorStart: sup.Start, KernelPID: kernel.PID,
		KernelStart: kernel.Start, Containment: cgroup.ModeProc, Started: time.Now().UTC(), Phase: record.PhaseRunning,
		BootID: record.BootID, Owner: os.Geteuid(), Slurm: &record.SlurmJob{Job: "14"}}
	if err := d.Write(st); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteSpare(record.Spare{KernelID: stopTestID, StandbyPID: standby.PID, StandbyStart: standby.Start,
		PID: spare.PID, Start: spare.Start, Ready: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	ln, err := d.ListenUnix(record.StandbyName(stopTestID))
	testutil.NoErr(t, err)
	ln.SetUnlinkOnClose(false) // as a SIGKILLed standby leaves it
	ln.Close()
	return dir
}

func stopAll(t *testing.T, dir string) string {
	t.Helper()
	sts, refused, err := record.ReadStates(dir)
	if err != nil || len(refused) > 0 || len(sts) != 1 {
		t.Fatalf("states %+v, refused %v, %v", sts, refused, err)
	}
	var out, errOut strings.Builder
	if code := Stop(&out, &errOut, sts, gpu.Off(os.ErrNotExist), How{Timeout: 5 * time.Second, Confirm: time.Second}); code != 0 {
		t.Fatalf("stop: %d: %s%s", code, out.String(), errOut.String())
	}
	return out.String()
}

// A user's stop of a kernel that ended with its Slurm job (supervisor,
// standby and spare all gone) leaves none of its records: not its state,
// nor its spare's record, nor the standby's socket (#36 item 4).
func TestStopRemovesEveryRecordOfADeadKernel(t *testing.T) {
	dir := plantKernel(t, deadRef(t), deadRef(t))
	out := stopAll(t, dir)
	if left := testutil.DirNames(t, dir); len(left) > 0 {
		t.Fatalf("stop left %v in the state directory (it said %q)", left, out)
	}
}

// A live standby's socket and record are not removed from under it when
// its kernel is finished for a next supervisor (the sweep, the watcher);
// `stop`, which ends the kernel for good, stops the standby too — the
// directory owner's process with the recorded start time, verified — and
// only then removes them.
func TestLiveStandbyKeepsItsSocketUnlessStopped(t *testing.T) {
	cmd, standby := liveStandby(t)
	dir := plantKernel(t, standby, standby)
	sts, _, err := record.ReadStates(dir)
	if err != nil || len(sts) != 1 {
		t.Fatal(sts, err)
	}
	d, err := record.OpenDir(dir, false, false)
	testutil.NoErr(t, err)
	defer d.Close()
	if _, err := d.Finish(sts[0], 2*time.Second); err != nil {
		t.Fatal(err)
	}
	want := []string{record.SpareName(stopTestID), record.StandbyName(stopTestID)}
	slices.Sort(want)
	if left := testutil.DirNames(t, dir); !slices.Equal(left, want) {
		t.Fatalf("finishing the kernel for a next supervisor left %v, want the live standby's %v", left, want)
	}
	if d.ReadSpare(stopTestID) == nil {
		t.Fatal("the live standby was stopped by a finish for a next supervisor")
	}

	// stop, once the record is there again.
	dir2 := plantKernel(t, standby, standby)
	out := stopAll(t, dir2)
	if left := testutil.DirNames(t, dir2); len(left) > 0 {
		t.Fatalf("stop left %v (it said %q)", left, out)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("the standby was not stopped (SIGTERM): %v", err)
	}
}

// Attack: a user's spare record names processes that are not the user's
// (root's, another user's) as its standby and spare, with their true start
// times. Root's `stop` of that user's kernel signals none of them: it acts
// only on the directory owner's processes.
func TestRootStopKillsNoOtherUsersProcessNamedBySpare(t *testing.T) {
	owner := testutil.NewUser(t, "spown", nil)
	victim := testutil.NewUser(t, "spvic", nil)
	_, rootProc := liveStandby(t)
	vcmd := exec.Command("sleep", "60")
	vcmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: victim.Cred}
	if err := vcmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vcmd.Process.Kill(); vcmd.Wait() })
	vstart, err := proc.StartTime(vcmd.Process.Pid)
	testutil.NoErr(t, err)
	dir := plantKernel(t, rootProc, proc.Ref{PID: vcmd.Process.Pid, Start: vstart})
	// The directory and all in it are the owner's, as its supervisor made
	// them (a record's owner is its directory's).
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, owner.UID, owner.GID)
	}); err != nil {
		t.Fatal(err)
	}
	out := stopAll(t, dir)
	for _, p := range []proc.Ref{rootProc, {PID: vcmd.Process.Pid, Start: vstart}} {
		// Alive, not a zombie: both are this test's children, reaped only
		// at its end.
		if pr, err := proc.Read(p.PID); err != nil || pr.Start != p.Start || !pr.Alive() {
			t.Errorf("root's stop of %s's kernel killed pid %d, named by its spare record but not %s's (stop said %q)", owner.Name, p.PID, owner.Name, out)
		}
	}
	if left := testutil.DirNames(t, dir); !slices.Contains(left, record.SpareName(stopTestID)) {
		t.Errorf("the spare record naming live processes was removed: %v", left)
	}
}
