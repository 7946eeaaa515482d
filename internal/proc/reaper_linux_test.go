package proc

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// testReaper is the one Reaper of the test process, which is a child subreaper.
var testReaper *Reaper

func TestMain(m *testing.M) {
	if err := SetChildSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testReaper = StartReaper()
	code := m.Run()
	testReaper.Stop()
	os.Exit(code)
}

func TestExitStatus(t *testing.T) {
	tests := []struct {
		name   string
		status unix.WaitStatus
		want   string
		code   int
	}{
		{name: "exit 0", status: 0, want: "exit code 0", code: 0},
		{name: "exit 3", status: 3 << 8, want: "exit code 3", code: 3},
		{name: "exit 255", status: 255 << 8, want: "exit code 255", code: 255},
		{name: "SIGKILL", status: unix.WaitStatus(unix.SIGKILL), want: "signal SIGKILL", code: 137},
		{name: "SIGSEGV core", status: unix.WaitStatus(unix.SIGSEGV) | 0x80, want: "signal SIGSEGV (core dumped)", code: 139},
		{name: "SIGSEGV", status: unix.WaitStatus(unix.SIGSEGV), want: "signal SIGSEGV", code: 139},
		{name: "stopped", status: unix.WaitStatus(unix.SIGSTOP)<<8 | 0x7f, want: "wait status 0x137f", code: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			es := ExitStatus{Pid: 1, Status: tc.status}
			if got := es.String(); got != tc.want {
				t.Errorf("String = %q, want %q", got, tc.want)
			}
			if got := es.Code(); got != tc.code {
				t.Errorf("Code = %d, want %d", got, tc.code)
			}
		})
	}
}

// TestReaperDeliversFastExits: children that exit at once still get their
// status delivered, exactly once, to the right channel.
func TestReaperDeliversFastExits(t *testing.T) {
	const n = 30
	chans := make([]<-chan ExitStatus, n)
	pids := make([]int, n)
	for i := range n {
		script := fmt.Sprintf("exit %d", i)
		pid, ch, err := testReaper.StartProcess("/bin/sh", []string{"sh", "-c", script},
			&syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
		testutil.NoErr(t, err)
		pids[i], chans[i] = pid, ch
	}
	for i, ch := range chans {
		select {
		case es := <-ch:
			if es.Pid != pids[i] || es.Code() != i || es.String() != fmt.Sprintf("exit code %d", i) {
				t.Errorf("child %d: got pid %d %q", pids[i], es.Pid, es)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no status for child %d", pids[i])
		}
		select {
		case es := <-ch:
			t.Errorf("second status for %d: %v", pids[i], es)
		default:
		}
		if testReaper.Owns(pids[i]) {
			t.Errorf("Owns(%d) after its exit", pids[i])
		}
	}
	testutil.WaitNoZombies(t)
}

func TestReaperStartError(t *testing.T) {
	_, _, err := testReaper.StartProcess("/nonexistent/x", []string{"x"}, &syscall.ProcAttr{})
	if !errors.Is(err, unix.ENOENT) {
		t.Errorf("StartProcess = %v, want wrapped ENOENT", err)
	}
}

// TestReaperReapsOrphans: a double fork through /bin/sh leaves an orphan
// re-parented to the test process; the Reaper reaps it when it exits.
func TestReaperReapsOrphans(t *testing.T) {
	before := testReaper.Orphans()
	_, ch, err := testReaper.StartProcess("/bin/sh", []string{"sh", "-c", "(sleep 0.05 &) ; exit 0"},
		&syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	testutil.NoErr(t, err)
	<-ch
	deadline := time.Now().Add(10 * time.Second)
	for testReaper.Orphans() == before {
		if time.Now().After(deadline) {
			t.Fatal("orphan not reaped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	testutil.WaitNoZombies(t)
}

// TestReaperDrainLeavesNoZombie: orphans of a tree (a double fork) that
// exit just before the supervisor does are reaped by Drain, not left to
// PID 1 as zombies (#24: PID 1 of a container without --init never waits).
func TestReaperDrainLeavesNoZombie(t *testing.T) {
	// sh forks a grandchild that outlives it by 50 ms: the grandchild is
	// re-parented to this (subreaper) process and exits while nobody waits.
	pid, ch, err := testReaper.StartProcess("/bin/sh", []string{"sh", "-c", "(sleep 0.05 &) ; exit 0"},
		&syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	testutil.NoErr(t, err)
	<-ch
	if !testReaper.Drain(5 * time.Second) {
		t.Fatalf("Drain: children still there 5 s after sh %d's grandchild (sleep 0.05) was started", pid)
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); !errors.Is(err, unix.ECHILD) {
		t.Fatalf("after Drain a child is left (waitid: %v)", err)
	}
	// A child that runs on keeps Drain waiting no longer than it was told.
	pid, ch, err = testReaper.StartProcess("/bin/sleep", []string{"sleep", "60"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	testutil.NoErr(t, err)
	defer func() { unix.Kill(pid, unix.SIGKILL); <-ch }()
	if testReaper.Drain(20 * time.Millisecond) {
		t.Fatal("Drain said no child is left while sleep 60 runs")
	}
}
