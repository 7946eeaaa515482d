package cgroup

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// What the tests check about real processes: what the helpers reported,
// whether it is still alive, and whether the Reaper left zombies.

// procID is one process, told from a later one with the same pid by its start time.
type procID struct {
	pid   int
	start uint64
}

// readPidfile returns the processes reported so far.
func readPidfile(t *testing.T, path string) []procID {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	testutil.NoErr(t, err)
	defer f.Close()
	var ids []procID
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var id procID
		if _, err := fmt.Sscan(sc.Text(), &id.pid, &id.start); err != nil {
			t.Fatalf("pidfile line %q: %v", sc.Text(), err)
		}
		ids = append(ids, id)
	}
	return ids
}

// waitReported waits until at least n processes have reported.
func waitReported(t *testing.T, path string, n int) []procID {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ids := readPidfile(t, path)
		if len(ids) >= n {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d helper processes reported in time", len(ids), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// aliveIDs returns those of ids that are still alive (not zombies).
func aliveIDs(t *testing.T, ids []procID) []procID {
	t.Helper()
	r := proc.StatReader{Root: "/proc"}
	var alive []procID
	for _, id := range ids {
		s, ok, err := r.Read(id.pid)
		testutil.NoErr(t, err)
		if ok && s.Start == id.start && s.Alive() {
			alive = append(alive, id)
		}
	}
	return alive
}

// killChecked checks that Pids covers every reported live process, kills
// the tree, and checks that Kill counted at least what Pids saw.
func killChecked(t *testing.T, tr Tree, ids []procID) {
	t.Helper()
	pids, err := tr.Pids()
	testutil.NoErr(t, err)
	for _, id := range aliveIDs(t, ids) {
		if !slices.Contains(pids, id.pid) {
			t.Errorf("Pids() = %v: misses reported process %d", pids, id.pid)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	killed, err := tr.Kill(ctx)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Kill: %v", err)
	}
	t.Logf("killed %d processes (%d seen in Pids before) in %v", killed, len(pids), elapsed)
	if killed < len(pids) {
		t.Errorf("Kill killed %d, want >= %d", killed, len(pids))
	}
}
