package proc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// MarkerEnv names the environment variable every process of a kernel's
// tree inherits: in the proc mode, where there is no cgroup, it is how the
// tree's processes are found once the supervisor (their subreaper) is gone
// and they have been reparented away. A process that clears its
// environment is not found; the proc mode is the fallback for hosts
// without a usable cgroup (docs/design.md#containment).
const MarkerEnv = "TFGPU_TREE"

// NewMarker makes a tree marker for kernel id, unique to the caller:
// ID/16 hex digits.
func NewMarker(id string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return id + "/" + hex.EncodeToString(b[:])
}

// markedPids lists the live processes of owner started at or after since
// (clock ticks after boot; a process started before the tree's first one
// cannot carry its marker) whose environment carries marker. A process's
// environment is read from its memory, which its owner may back with a
// file system that never answers (FUSE): the reads run apart, and when ctx
// ends first, what was found by then is returned.
func markedPids(ctx context.Context, marker string, owner int, since uint64) []int {
	r := StatReader{Root: "/proc"}
	procs, err := r.Scan()
	if err != nil {
		return []int{}
	}
	self := os.Getpid()
	found := make(chan int, 16)
	go func() {
		defer close(found)
		for pid, p := range procs {
			if pid <= 1 || pid == self || !p.Alive() || p.Start < since || Owner(pid) != owner {
				continue
			}
			if readMarker(pid) == marker {
				select {
				case found <- pid:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	pids := []int{}
	for {
		select {
		case p, ok := <-found:
			if !ok {
				return pids
			}
			pids = append(pids, p)
		case <-ctx.Done():
			return pids
		}
	}
}

// Pauses between kill rounds, as in cgroup's proc mode: short first, since a
// SIGKILLed process is usually a zombie within a millisecond, growing so
// that a slow exit does not spin a core.
const (
	firstPause = time.Millisecond
	maxPause   = 20 * time.Millisecond
)

// KillMarked SIGSTOPs and then SIGKILLs every process of owner whose
// environment carries marker, until none is left or ctx ends; it returns
// how many it killed.
func KillMarked(ctx context.Context, marker string, owner int) (int, error) {
	return KillMarkedSince(ctx, marker, owner, 0)
}

// KillMarkedSince is KillMarked of the processes started at or after since
// (clock ticks after boot, as /proc's starttime): the supervisor passes
// its own start, so that each kill reads the environments of only the
// processes that may be the tree's.
func KillMarkedSince(ctx context.Context, marker string, owner int, since uint64) (int, error) {
	killed := map[int]bool{}
	for pause := firstPause; ; pause = min(2*pause, maxPause) {
		found := markedPids(ctx, marker, owner, since)
		if len(found) == 0 {
			if ctx.Err() != nil {
				return len(killed), fmt.Errorf("processes of tree %s: %w", marker, ctx.Err())
			}
			return len(killed), nil
		}
		for _, p := range found {
			_ = unix.Kill(p, unix.SIGSTOP) // none forks again after the scan that missed its child
		}
		for _, p := range found {
			if err := unix.Kill(p, unix.SIGKILL); err == nil {
				killed[p] = true
			}
		}
		select {
		case <-ctx.Done():
			return len(killed), fmt.Errorf("processes of tree %s still alive: %w", marker, ctx.Err())
		case <-time.After(pause):
		}
	}
}
