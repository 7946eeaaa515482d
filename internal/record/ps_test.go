package record

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// ps shows every record it is given, and a kernel whose supervisor is gone
// is dirty, with no processes once its kernel is gone.
func TestPSShowsDirtyKernels(t *testing.T) {
	a, b := testutil.PrivateDir(t), testutil.PrivateDir(t)
	gone := deadPid(t)
	for i, dir := range []string{a, b} {
		st := State{KernelID: []string{"k-a", "k-b"}[i], SupervisorPID: gone, KernelPID: gone, Containment: "proc",
			Started: time.Now().Add(time.Duration(i) * time.Second), Phase: PhaseRunning}
		writeStateIn(t, dir, st)
	}
	var states []State
	for _, dir := range []string{a, b} {
		sts, _, err := ReadStates(dir)
		testutil.NoErr(t, err)
		states = append(states, sts...)
	}
	rows, note := PS(states, "")
	if len(rows) != 2 || rows[0].KernelID != "k-a" || rows[1].KernelID != "k-b" {
		t.Fatalf("PS = %+v, %q", rows, note)
	}
	for _, r := range rows {
		if r.State != StateDirty || len(r.PIDs) != 0 || r.RSSBytes != 0 {
			t.Errorf("row %+v: want dirty, no processes", r)
		}
	}
}

// deadPid is the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	testutil.NoErr(t, err)
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}

// writeStateIn writes a record into the state directory dir.
func writeStateIn(t *testing.T, dir string, st State) {
	t.Helper()
	d, err := OpenDir(dir, true, false)
	testutil.NoErr(t, err)
	defer d.Close()
	if err := d.Write(st); err != nil {
		t.Fatal(err)
	}
}

// A record without its supervisor's start time is never taken for a dead
// supervisor's while that pid is a live process of the owner: the next
// start would otherwise finish a running kernel.
func TestRecordWithoutStartTimeIsNotTakenForDead(t *testing.T) {
	st := State{KernelID: "k-nostart", SupervisorPID: os.Getpid(), Owner: os.Geteuid()}
	if !st.SupervisorAlive() {
		t.Fatal("a live supervisor without a recorded start time is taken for dead")
	}
	st.Owner = nobody
	if st.SupervisorAlive() {
		t.Fatal("another user's process is taken for the record's supervisor")
	}
	st.Owner, st.SupervisorPID = os.Geteuid(), deadPid(t)
	if st.SupervisorAlive() {
		t.Fatal("a gone supervisor is taken for alive")
	}
}

// A state directory reached by two paths (a user's home linked to
// another's) is read once: its kernels are not listed twice, and an exact
// id does not look ambiguous.
func TestUniqueDirs(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "alice", "state")
	b := filepath.Join(root, "bob", "state")
	for _, d := range []string{a, b} {
		testutil.NoErr(t, os.MkdirAll(d, 0o700))
	}
	testutil.NoErr(t, os.Symlink(filepath.Join(root, "alice"), filepath.Join(root, "mallory")))
	testutil.NoErr(t, os.Symlink(b, filepath.Join(root, "linked")))
	own := filepath.Join(root, "own")
	os.Mkdir(own, 0o700)
	got := uniqueDirs(own, []string{a, filepath.Join(root, "mallory", "state"), b, filepath.Join(root, "linked"), a, filepath.Join(root, "none"), own})
	want := []string{own, a, b}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("uniqueDirs = %q, want %q", got, want)
	}
}
