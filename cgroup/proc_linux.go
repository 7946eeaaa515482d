package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// Pauses between kill rounds: short first, since SIGKILLed processes are
// usually zombies within a millisecond, growing so that a slow exit (a large
// address space to tear down, a process in D state) does not spin a core.
const (
	firstPause = time.Millisecond
	maxPause   = 20 * time.Millisecond
)

// procTree is the "proc" mode: process group + child subreaper + /proc scan.
type procTree struct {
	self int
	opts procOptions

	killMu sync.Mutex // one Kill at a time; also serializes use of stats
	stats  proc.StatReader

	mu     sync.Mutex
	leader int
	closed bool
}

var _ Tree = (*procTree)(nil)

// NewProcTree returns a Tree in "proc" mode for a supervisor whose pid is
// supervisorPID (os.Getpid()). The supervisor must be a child subreaper
// (proc.SetChildSubreaper) before it spawns the leader, or orphans that leave the
// leader's process group escape.
func NewProcTree(supervisorPID int, opts ...ProcOption) Tree {
	t := &procTree{self: supervisorPID, stats: proc.StatReader{Root: "/proc"}}
	for _, o := range opts {
		o(&t.opts)
	}
	return t
}

func (t *procTree) Mode() string { return ModeProc }

// Dir is "": the proc mode has no cgroup.
func (t *procTree) Dir() string { return "" }

// Configure puts the leader in a new process group of its own (pgid = its
// pid), so that the group outlives the leader and names the tree.
func (t *procTree) Configure(attr *syscall.SysProcAttr) error {
	if err := checkGroupAttr(attr, "proc tree"); err != nil {
		return err
	}
	// Closed, as the cgroup modes: a process started now would be one
	// that Kill (ErrClosed) no longer kills.
	if _, closed := t.state(); closed {
		return fmt.Errorf("configure proc tree: %w", ErrClosed)
	}
	attr.Setpgid, attr.Pgid = true, 0
	return nil
}

func (t *procTree) Started(pid int) {
	t.mu.Lock()
	t.leader = pid
	t.mu.Unlock()
}

func (t *procTree) state() (leader int, closed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leader, t.closed
}

func (t *procTree) Pids() ([]int, error) {
	leader, closed := t.state()
	if closed {
		return nil, fmt.Errorf("list process tree: %w", ErrClosed)
	}
	t.killMu.Lock()
	defer t.killMu.Unlock()
	pids, err := t.scan(leader)
	if err != nil {
		return nil, fmt.Errorf("list process tree of %d: %w", leader, err)
	}
	return pids, nil
}

// scan returns the live members of leader's tree. Callers hold killMu.
func (t *procTree) scan(leader int) ([]int, error) {
	if leader <= 1 {
		return nil, nil // not started: nothing to find, and pgrp <= 1 must never match
	}
	procs, err := t.stats.Scan()
	if err != nil {
		return nil, err
	}
	return proc.Members(procs, t.self, leader, t.opts.exclude, t.stats.Read)
}

// Kill repeats {scan; SIGSTOP all; SIGKILL all} until a scan finds no live
// member. SIGSTOP goes to every member before any SIGKILL so that none of
// them can fork a child after the scan that missed it; a child forked
// before the stop is found by the next scan.
func (t *procTree) Kill(ctx context.Context) (int, error) {
	leader, closed := t.state()
	if closed {
		return 0, fmt.Errorf("kill process tree: %w", ErrClosed)
	}
	t.killMu.Lock()
	defer t.killMu.Unlock()

	killed := make(map[int]struct{})
	var sigErr error // first unexpected signal error, reported if the tree survives
	pause := firstPause
	timer := time.NewTimer(pause)
	defer timer.Stop()
	for round := 1; ; round++ {
		live, err := t.scan(leader)
		if err != nil {
			return len(killed), fmt.Errorf("kill process tree of %d: %w", leader, err)
		}
		if len(live) == 0 {
			return len(killed), nil
		}
		for _, pid := range live {
			if err := t.signal(pid, unix.SIGSTOP); err != nil && sigErr == nil {
				sigErr = err
			}
		}
		for _, pid := range live {
			if err := t.signal(pid, unix.SIGKILL); err != nil {
				if sigErr == nil {
					sigErr = err
				}
				continue
			}
			killed[pid] = struct{}{}
		}
		timer.Reset(pause)
		select {
		case <-timer.C:
			pause = min(2*pause, maxPause)
		case <-ctx.Done():
			return t.survivors(ctx, leader, round, len(killed), sigErr)
		}
	}
}

// survivors reports, once ctx has ended, what is still alive.
func (t *procTree) survivors(ctx context.Context, leader, rounds, killed int, sigErr error) (int, error) {
	live, err := t.scan(leader)
	if err != nil {
		return killed, fmt.Errorf("kill process tree of %d: %w", leader, err)
	}
	if len(live) == 0 {
		return killed, nil // the last ones died while we waited
	}
	if len(live) > 8 {
		live = live[:8]
	}
	err = fmt.Errorf("kill process tree of %d: %d rounds, still alive %v: %w",
		leader, rounds, live, ctx.Err())
	if sigErr != nil {
		err = fmt.Errorf("%w (first signal error: %w)", err, sigErr)
	}
	return killed, err
}

// signal sends sig to one process, with the guards that keep a bad scan from
// hurting anything else: never pid <= 1 (kill(2) gives 0 and -1 group and
// broadcast meanings, and 1 is init), never the supervisor itself.
func (t *procTree) signal(pid int, sig unix.Signal) error {
	if pid <= 1 || pid == t.self {
		return fmt.Errorf("signal %v to pid %d: refused", sig, pid)
	}
	err := unix.Kill(pid, sig)
	if errors.Is(err, unix.ESRCH) {
		// Expected: it died (or was reaped) between the scan and the signal,
		// which is what we want.
		return nil
	}
	if err != nil {
		return fmt.Errorf("signal %v to pid %d: %w", sig, pid, err)
	}
	return nil
}

func (t *procTree) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	return nil
}

// checkGroupAttr refuses attributes that conflict with putting the leader in
// a process group of its own, which every mode does: setpgid(2) fails with
// EPERM on a session leader, and Foreground moves the terminal's group.
func checkGroupAttr(attr *syscall.SysProcAttr, what string) error {
	if attr == nil {
		return fmt.Errorf("configure %s: nil SysProcAttr", what)
	}
	if attr.Setsid || attr.Foreground {
		return fmt.Errorf("configure %s: Setsid and Foreground conflict with Setpgid", what)
	}
	return nil
}

// TreeCPU is the CPU time the tree's processes have used: the cgroup's
// own account when it is a cgroup v2 (cpu.stat usage_usec, which keeps
// what exited processes used), else the sum over its live processes.
func TreeCPU(t Tree) time.Duration {
	if m := t.Mode(); (m == ModeV2 || m == ModeSystemd) && t.Dir() != "" {
		if b, err := os.ReadFile(t.Dir() + "/cpu.stat"); err == nil {
			for _, line := range bytes.Split(b, []byte("\n")) {
				if v, ok := bytes.CutPrefix(line, []byte("usage_usec ")); ok {
					if us, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
						return time.Duration(us) * time.Microsecond
					}
				}
			}
		}
	}
	pids, _ := t.Pids()
	var sum time.Duration
	for _, p := range pids {
		sum += proc.CPU(p)
	}
	return sum
}
