package proc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// A Snapshot is one scan of /proc, for a caller that asks about many trees
// at once: root's ps over every user's kernels reads each process's stat
// once per run, and its owner, memory and tree marker at most once, however
// many records name it (a record is a claim any user can plant; a
// thousand of them must not cost a thousand scans). What it says is as of
// the scan.
type Snapshot struct {
	procs   map[int]Stat
	owners  map[int]int
	rss     map[int]int64
	markers map[int]string // TFGPU_TREE of the processes of the owners in marked
	marked  map[int]bool   // owners whose processes' markers were read

	// MarkersIncomplete: some environment did not answer within
	// markerWait, so Marked may have missed processes.
	MarkersIncomplete bool
}

// markerWait bounds the reading of one owner's environments.
const markerWait = 3 * time.Second

// TakeSnapshot scans /proc.
func TakeSnapshot() (*Snapshot, error) {
	r := StatReader{Root: "/proc"}
	procs, err := r.Scan()
	if err != nil {
		return nil, err
	}
	return &Snapshot{procs: procs, owners: map[int]int{}, rss: map[int]int64{}, markers: map[int]string{}, marked: map[int]bool{}}, nil
}

// Pids lists the processes of the snapshot, live or not.
func (s *Snapshot) Pids() []int {
	out := make([]int, 0, len(s.procs))
	for p := range s.procs {
		out = append(out, p)
	}
	return out
}

// Proc is pid's stat as of the scan.
func (s *Snapshot) Proc(pid int) (Proc, bool) {
	p, ok := s.procs[pid]
	return p.Proc(), ok
}

// Comm is pid's command name as of the scan ("" when it was not there).
func (s *Snapshot) Comm(pid int) string {
	p := s.procs[pid]
	return string(bytes.TrimRight(p.Comm[:], "\x00"))
}

// Owner is pid's owner (-1 when it is gone), read once.
func (s *Snapshot) Owner(pid int) int { return memo(s.owners, pid, Owner) }

// RSS is pid's resident memory in bytes, read once.
func (s *Snapshot) RSS(pid int) int64 { return memo(s.rss, pid, RSS) }

// memo is m[pid], read (once) when m has none.
func memo[T any](m map[int]T, pid int, read func(int) T) T {
	if v, ok := m[pid]; ok {
		return v
	}
	v := read(pid)
	m[pid] = v
	return v
}

// Tree lists the live members of the proc-mode tree of leader under the
// subreaper supervisor (-1: none), as cgroup.NewProcTree's Pids would, but
// for the supervisor's own helpers: its children for which exclude (may be nil)
// says so, and any child named tfgpu-kernel (a watcher or standby of a
// record that does not name them), with their descendants.
func (s *Snapshot) Tree(supervisor, leader int, exclude func(pid int) bool) []int {
	m := membership{procs: s.procs, self: supervisor, leader: leader,
		exclude: func(pid int) bool { return s.Comm(pid) == "tfgpu-kernel" || (exclude != nil && exclude(pid)) }}
	pids, _ := m.live()
	if pids == nil {
		pids = []int{}
	}
	return pids
}

// Marked lists the live processes of owner whose environment carries
// marker (markedPids, from the snapshot: the environments of owner's
// processes are read once, whatever the number of markers asked for).
func (s *Snapshot) Marked(marker string, owner int) []int {
	if !s.marked[owner] {
		s.marked[owner] = true
		var todo []int
		for pid, p := range s.procs {
			if pid > 1 && pid != os.Getpid() && p.Alive() && s.Owner(pid) == owner {
				todo = append(todo, pid)
			}
		}
		// A process's environment is read from its memory, which its owner
		// may back with a file system that never answers (FUSE): the reads
		// run apart, and what is not read within markerWait is not found.
		found := make(chan map[int]string, 1)
		go func() {
			m := map[int]string{}
			for _, pid := range todo {
				if v := readMarker(pid); v != "" {
					m[pid] = v
				}
			}
			found <- m
		}()
		select {
		case m := <-found:
			for pid, v := range m {
				s.markers[pid] = v
			}
		case <-time.After(markerWait):
			s.MarkersIncomplete = true
		}
	}
	pids := []int{}
	for pid, m := range s.markers {
		if m == marker && s.Owner(pid) == owner {
			pids = append(pids, pid)
		}
	}
	return pids
}

// maxEnviron bounds what readMarker reads of an environment.
const maxEnviron = 1 << 20

// readMarker is the TFGPU_TREE value in pid's environment, "" when none;
// at most maxEnviron bytes are read.
func readMarker(pid int) string {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/environ", unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	buf := make([]byte, 64<<10)
	var env []byte
	for len(env) < maxEnviron {
		n, err := unix.Read(fd, buf)
		if n <= 0 || err != nil {
			break
		}
		env = append(env, buf[:n]...)
	}
	want := []byte(MarkerEnv + "=")
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, want); ok {
			return string(v)
		}
	}
	return ""
}

// Ref names a process by pid and start time (clock ticks after boot):
// a later process with the same pid is not it.
type Ref struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// Related lists the live processes of owner that are one of roots (with
// its start time), descend from one of them, or are in process group pgid
// (> 1) having started at or after since: what is left of a proc-mode tree
// whose subreaper is gone, found from /proc/PID/stat alone, which a
// process cannot hide (its environment it can, by making itself
// non-dumpable).
func (s *Snapshot) Related(roots []Ref, pgid, owner int, since uint64) []int {
	member := map[int]bool{}
	for _, r := range roots {
		if p, ok := s.procs[r.PID]; ok && p.Start == r.Start && r.PID > 1 {
			member[r.PID] = true
		}
	}
	var in func(pid int, depth int) bool
	in = func(pid int, depth int) bool {
		p, ok := s.procs[pid]
		switch {
		case !ok || pid <= 1 || depth > 64:
			return false
		case member[pid]:
			return true
		case pgid > 1 && p.Pgrp == pgid && p.Start >= since:
			return true
		}
		return in(p.PPid, depth+1)
	}
	var out []int
	self := os.Getpid()
	for pid, p := range s.procs {
		if pid != self && p.Alive() && in(pid, 0) && s.Owner(pid) == owner {
			out = append(out, pid)
		}
	}
	return out
}

// KillRelated SIGSTOPs and SIGKILLs what Related finds, scan after scan,
// until none is left or ctx ends; it returns how many it killed.
func KillRelated(ctx context.Context, roots []Ref, pgid, owner int, since uint64) (int, error) {
	killed := map[int]bool{}
	for pause := firstPause; ; pause = min(2*pause, maxPause) {
		sn, err := TakeSnapshot()
		if err != nil {
			return len(killed), err
		}
		found := sn.Related(roots, pgid, owner, since)
		if len(found) == 0 {
			return len(killed), nil
		}
		for _, p := range found {
			_ = unix.Kill(p, unix.SIGSTOP)
		}
		for _, p := range found {
			if err := unix.Kill(p, unix.SIGKILL); err == nil {
				killed[p] = true
			}
		}
		select {
		case <-ctx.Done():
			return len(killed), fmt.Errorf("processes of the tree still alive: %w", ctx.Err())
		case <-time.After(pause):
		}
	}
}
