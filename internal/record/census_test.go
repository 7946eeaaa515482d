package record

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// startProc starts argv as a child of this process (setsid or its own
// process group), killed and reaped at the end of the test, and returns
// its pid and start time.
func startProc(t *testing.T, sys *syscall.SysProcAttr, argv ...string) (int, uint64) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = sys
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Process.Kill()
		cmd.Wait()
	})
	start, err := proc.StartTime(cmd.Process.Pid)
	testutil.NoErr(t, err)
	return cmd.Process.Pid, start
}

// childOf waits for the one child of pid and returns it.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		sn, err := proc.TakeSnapshot()
		testutil.NoErr(t, err)
		for _, p := range sn.Pids() {
			if pr, ok := sn.Proc(p); ok && pr.PPid == pid && pr.Alive() {
				return p
			}
		}
	}
	t.Fatalf("process %d started no child", pid)
	return 0
}

// One kernel, however many processes (#32): the census names each live
// process of a kernel in its role from its record and its spare's record —
// the supervisor (here this test process), its watcher, the kernel and its
// tree, the standby with its spare — and the standby and the watcher,
// children of the supervisor outside the kernel's cgroup, are neither in
// the kernel's tree nor "escaped"; a tree process that left the cgroup
// is.
func TestCensusNamesEveryProcessInItsRole(t *testing.T) {
	requireRootUser(t)
	parent := requireCgroupV2(t)
	const id = "5b2c1e7a-cccc-4bbb-8ccc-000000000003"
	self := os.Getpid()
	selfStart, err := proc.StartTime(self)
	testutil.NoErr(t, err)
	cg := filepath.Join(parent, "tfgpu-"+id+"-"+strconv.Itoa(self))
	testutil.NoErr(t, os.Mkdir(cg, 0o755))
	t.Cleanup(func() { os.Remove(cg) })
	twoSleeps := []string{"/bin/sh", "-c", "sleep 600 & exec sleep 600"}
	watcher, watcherStart := startProc(t, &syscall.SysProcAttr{Setsid: true}, "sleep", "600")
	kernel, kernelStart := startProc(t, &syscall.SysProcAttr{Setpgid: true}, twoSleeps...)
	worker := childOf(t, kernel)
	standby, standbyStart := startProc(t, &syscall.SysProcAttr{Setsid: true}, twoSleeps...)
	sparePid := childOf(t, standby)
	spareStart, _ := proc.StartTime(sparePid)
	for _, p := range []int{kernel, worker} {
		testutil.NoErr(t, os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(p)), 0o644))
	}
	// The worker leaves the kernel's cgroup (a delegated cgroup lets it).
	testutil.NoErr(t, os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(worker)), 0o644))

	dir := testutil.PrivateDir(t)
	st := State{KernelID: id, SupervisorPID: self, SupervisorStart: selfStart, KernelPID: kernel, KernelStart: kernelStart,
		Containment: cgroup.ModeV2, Cgroup: cg, Phase: PhaseRunning, Started: time.Now(),
		Watcher: &proc.Ref{PID: watcher, Start: watcherStart}}
	writeStateIn(t, dir, st)
	d, err := OpenDir(dir, false, false)
	testutil.NoErr(t, err)
	defer d.Close()
	if err := d.WriteSpare(Spare{KernelID: id, StandbyPID: standby, StandbyStart: standbyStart, PID: sparePid, Start: spareStart,
		Ready: time.Now()}); err != nil {
		t.Fatal(err)
	}
	states, _, err := ReadStates(dir)
	if err != nil || len(states) != 1 {
		t.Fatalf("ReadStates = %v, %v", states, err)
	}
	ks := Census(states, nil)
	if len(ks) != 1 {
		t.Fatalf("Census = %+v", ks)
	}
	k := ks[0]
	for pid, want := range map[int]Role{self: RoleSupervisor, watcher: RoleWatcher, kernel: RoleKernel, worker: RoleTree,
		standby: RoleStandby, sparePid: RoleSpare} {
		if got := k.RoleOf(pid); got != want {
			t.Errorf("process %d is %q, want %q (members %+v)", pid, got, want, k.Members)
		}
	}
	if got := k.Pids(TreeRoles...); !slices.Equal(got, sortedInts(kernel, worker)) {
		t.Errorf("the kernel's tree is %v, want the kernel and its worker %v", got, sortedInts(kernel, worker))
	}
	if !slices.Equal(k.Escaped, []int{worker}) {
		t.Errorf("escaped %v, want only the worker %d that left the cgroup (the standby %d, its spare %d and the watcher %d are not the tree's)",
			k.Escaped, worker, standby, sparePid, watcher)
	}
	if k.Key() != (Key{UID: os.Geteuid(), ID: id}) || k.Launched() != self {
		t.Errorf("key %v, launched %d", k.Key(), k.Launched())
	}
	rows, _ := PS(states, "")
	if len(rows) != 1 || len(rows[0].PIDs) != 2 || !slices.Equal(rows[0].Escaped, []int{worker}) || rows[0].Spare == nil ||
		rows[0].Spare.RSSBytes == 0 || len(rows[0].Processes) != 6 {
		t.Errorf("ps row %+v", rows)
	}
}

func sortedInts(v ...int) []int {
	slices.Sort(v)
	return v
}

// Root finds a kernel through the state directory its supervisor holds
// open, whatever process that is and whatever its command line says (a
// standby that took over a restart was not found, #32): a record is taken
// when the process it names as its supervisor, with its start time, holds
// that very directory; a record naming a live process that does not is a
// claim nothing backs. A directory held by two processes of the kernel
// (the stub and the supervisor) is read once.
func TestCollectFindsKernelsThroughHeldDirectories(t *testing.T) {
	requireRootUser(t)
	held := testutil.PrivateDir(t)
	own := testutil.PrivateDir(t)
	// A program named tfgpu-kernel that holds the directory open (fd 3),
	// as every supervisor, standby and stub does.
	bin := filepath.Join(t.TempDir(), "tfgpu-kernel")
	b, err := os.ReadFile("/bin/sleep")
	testutil.NoErr(t, err)
	testutil.NoErr(t, os.WriteFile(bin, b, 0o755))
	holder := func() (int, uint64) {
		f, err := os.Open(held)
		testutil.NoErr(t, err)
		defer f.Close()
		cmd := exec.Command(bin, "600")
		cmd.ExtraFiles = []*os.File{f}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		start, err := proc.StartTime(cmd.Process.Pid)
		testutil.NoErr(t, err)
		return cmd.Process.Pid, start
	}
	sup, supStart := holder()
	holder() // a second holder: the stub of a standby that took over
	self := os.Getpid()
	selfStart, _ := proc.StartTime(self)
	writeStateIn(t, held, State{KernelID: "k-held", SupervisorPID: sup, SupervisorStart: supStart, Phase: PhaseRunning})
	// A claim: this test process holds no state directory.
	writeStateIn(t, held, State{KernelID: "k-claim", SupervisorPID: self, SupervisorStart: selfStart, Phase: PhaseRunning})

	states, refusals, err := Collect(own, false)
	testutil.NoErr(t, err)
	var ids []string
	for _, st := range states {
		if st.Dir == held { // root's other kernels on the host are not this test's
			ids = append(ids, st.KernelID)
			if st.Owner != os.Geteuid() {
				t.Errorf("%s: owner %d", st.KernelID, st.Owner)
			}
		}
	}
	if !slices.Equal(ids, []string{"k-held"}) {
		t.Fatalf("Collect listed %v from %s (refusals %v); want k-held once, not the claim k-claim", ids, held, refusals)
	}
}
