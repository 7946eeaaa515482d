package cgroup

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
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

// MarkedPids lists the live processes of owner whose environment carries
// marker.
func MarkedPids(marker string, owner int) []int {
	want := []byte(MarkerEnv + "=" + marker + "\x00")
	pids := []int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return pids
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == os.Getpid() || ProcOwner(pid) != owner {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !(bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...))) {
			continue
		}
		if p, err := ReadProc(pid); err == nil && p.Alive() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillMarked SIGSTOPs and then SIGKILLs every process of owner whose
// environment carries marker, until none is left or ctx ends; it returns
// how many it killed.
func KillMarked(ctx context.Context, marker string, owner int) (int, error) {
	killed := map[int]bool{}
	for pause := firstPause; ; pause = min(2*pause, maxPause) {
		found := MarkedPids(marker, owner)
		if len(found) == 0 {
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
