package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// A user NewUser made for a test binary that died before its cleanups ran
// (go test's -timeout kills it) is removed by the next binary's sweep; a
// live binary's user is not.
func TestSweepUsersTakesOnlyADeadBinarysUsers(t *testing.T) {
	Integration(t)
	if os.Geteuid() != 0 {
		RequireOrSkip(t, "needs root (useradd)")
	}
	dead := exec.Command("sleep", "60")
	NoErr(t, dead.Start())
	orphan, live := userName("sweep"), userName("sweep")
	addUser(t, orphan, "/nonexistent", dead.Process.Pid)
	addUser(t, live, "/nonexistent", os.Getpid())
	t.Cleanup(func() { _ = exec.Command("userdel", orphan).Run(); removeUser(t, live) })
	NoErr(t, dead.Process.Kill())
	_ = dead.Wait()

	sweepUsers()
	if exec.Command("id", orphan).Run() == nil {
		t.Errorf("%s, made for a binary that is gone, is still there", orphan)
	}
	if err := exec.Command("id", live).Run(); err != nil {
		t.Errorf("%s, this binary's, was removed: %v", live, err)
	}
}
