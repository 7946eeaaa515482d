package testutil

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ZombieChildren returns the children of the test process that are
// zombies, read from /proc/PID/stat (here, not through internal/proc,
// whose own tests use it).
func ZombieChildren(t testing.TB) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var z []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since ReadDir
		}
		// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(os.Getpid()) {
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
