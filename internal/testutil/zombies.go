package testutil

import (
	"os"
	"testing"
	"time"
)

// ZombieChildren returns the children of the test process that are
// zombies (read from /proc here, not through internal/proc, whose own
// tests use it).
func ZombieChildren(t testing.TB) []int {
	t.Helper()
	var z []int
	for _, pid := range Pids() {
		if st, ppid, ok := ProcStat(pid); ok && st == 'Z' && ppid == os.Getpid() {
			z = append(z, pid)
		}
	}
	return z
}

// WaitNoZombies waits until the test process has no zombie child: a
// reaper is asynchronous, so "reaped" is an event to wait for.
func WaitNoZombies(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for z := ZombieChildren(t); len(z) > 0; z = ZombieChildren(t) {
		if time.Now().After(deadline) {
			t.Fatalf("zombie children not reaped: %v", z)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
