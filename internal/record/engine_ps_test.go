package record

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// ps says what happened to a kernel whose supervisor an engine killed
// (#24): "ended with its Slurm job N" once the job's cgroups are gone,
// and nothing it cannot verify (cgroups still there, paths that are not a
// job's cgroups under /sys/fs/cgroup).
func TestPSSaysTheKernelEndedWithItsSlurmJob(t *testing.T) {
	dir := testutil.PrivateDir(t)
	gone := deadPid(t)
	there := t.TempDir()
	// A job's cgroup that is still there: a real one, as root can make it.
	live := "/sys/fs/cgroup/freezer/job_13"
	if os.Getuid() == 0 && os.Mkdir(live, 0o755) == nil {
		t.Cleanup(func() { os.Remove(live) })
	} else {
		testutil.RequireOrSkip(t, "needs root and a v1 freezer hierarchy to make a job's cgroup")
	}
	for _, tc := range []struct {
		name string
		job  *SlurmJob
		want string
	}{
		{"job over", &SlurmJob{Job: "12", Cgroups: []string{"/sys/fs/cgroup/freezer/slurm/uid_0/job_12", "/sys/fs/cgroup/memory/slurm/uid_0/job_12"}},
			"ended with its Slurm job 12"},
		{"a cgroup of the job still there", &SlurmJob{Job: "13", Cgroups: []string{"/sys/fs/cgroup/memory/job_13", live}},
			"its supervisor is gone; it ran in Slurm job 13"},
		{"not a job's cgroup", &SlurmJob{Job: "13", Cgroups: []string{"/sys/fs/cgroup/memory/x/../job_13"}},
			"its supervisor is gone; it ran in Slurm job 13"},
		{"a path a user chose", &SlurmJob{Job: "14", Cgroups: []string{filepath.Join(there, "job_14")}},
			"its supervisor is gone; it ran in Slurm job 14"},
		{"linuxproc: no cgroups to tell", &SlurmJob{Job: "15"}, "its supervisor is gone; it ran in Slurm job 15"},
		{"no job", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeStateIn(t, dir, State{KernelID: "k-slurm", SupervisorPID: gone, KernelPID: gone, Containment: cgroup.ModeProc,
				Started: time.Now(), Phase: PhaseRunning, Slurm: tc.job})
			sts, _, err := ReadStates(dir)
			if err != nil || len(sts) != 1 {
				t.Fatal(sts, err)
			}
			rows, _ := PS(sts, "")
			if len(rows) != 1 || rows[0].State != StateDirty || rows[0].Why != tc.want {
				t.Fatalf("ps row %+v; want dirty, why %q", rows, tc.want)
			}
		})
	}
}

// A v1 freezer cgroup left FROZEN (its supervisor SIGKILLed between its
// freeze and its thaw, with the watcher, by an engine's kill) is shown as
// frozen, with the command that thaws and kills it.
func TestPSSaysTheTreeIsFrozen(t *testing.T) {
	requireRootUser(t)
	l, err := cgroup.DetectLayout()
	testutil.NoErr(t, err)
	parent, err := cgroup.V1SelfDir(l, "freezer")
	if err != nil {
		testutil.RequireOrSkip(t, "needs a v1 freezer hierarchy: %v", err)
	}
	gone := deadPid(t)
	id := fmt.Sprintf("k-frozen-%d", os.Getpid())
	cg := filepath.Join(parent, "tfgpu-"+id+"-"+strconv.Itoa(gone))
	if err := os.Mkdir(cg, 0o755); err != nil {
		testutil.RequireOrSkip(t, "cannot make a freezer cgroup: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sleep := exec.CommandContext(ctx, "sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("THAWED"), 0)
		sleep.Process.Kill()
		sleep.Wait()
		for i := 0; i < 200 && os.Remove(cg) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	})
	testutil.NoErr(t, os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0))
	st := State{KernelID: id, SupervisorPID: gone, KernelPID: sleep.Process.Pid, Containment: cgroup.ModeV1, Cgroup: cg,
		Started: time.Now(), Phase: PhaseStopping, BootID: BootID}
	dir := testutil.PrivateDir(t)
	writeStateIn(t, dir, st)
	sts, _, err := ReadStates(dir)
	if err != nil || len(sts) != 1 {
		t.Fatal(sts, err)
	}
	if rows, _ := PS(sts, ""); rows[0].State != StateDirty {
		t.Fatalf("thawed: ps state %q; want dirty", rows[0].State)
	}
	testutil.NoErr(t, os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("FROZEN"), 0))
	// The freezer passes through FREEZING until every task has stopped.
	testutil.WaitFor(t, 30*time.Second, "the freezer to read FROZEN", func() bool {
		b, err := os.ReadFile(filepath.Join(cg, "freezer.state"))
		return err == nil && strings.TrimSpace(string(b)) == "FROZEN"
	})
	rows, _ := PS(sts, "")
	if rows[0].State != StateFrozen || !strings.Contains(rows[0].Why, "freezer.state reads FROZEN") ||
		!strings.Contains(rows[0].Why, "tfgpu-kernel stop "+id) || len(rows[0].PIDs) != 1 {
		t.Fatalf("frozen: ps row %+v; want frozen, naming freezer.state and the stop command, 1 process", rows[0])
	}
}
