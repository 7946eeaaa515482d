package cgroup

import (
	"context"
	"errors"
	"syscall"
)

// Tree is the containment of one kernel's process tree. Implementations:
// proc (NewProcTree), cgroup v2 (NewV2Tree); v1 later. See the package doc for the
// order of calls.
type Tree interface {
	// Mode names the mechanism: ModeProc, ModeV2, and later ModeV1.
	Mode() string
	// Configure prepares attr for spawning the leader: it sets the fields
	// the mode owns (Setpgid and Pgid; later the cgroup fd) and no others.
	Configure(attr *syscall.SysProcAttr) error
	// Started records the leader's pid, right after spawn.
	Started(pid int)
	// Pids returns the live (non-zombie) processes of the tree now.
	Pids() ([]int, error)
	// Kill kills every process of the tree and returns when none is alive
	// (zombies count as dead), with the number of processes it killed; or
	// when ctx ends, with an error that says how many survive and wraps
	// ctx.Err(). Idempotent; safe when the leader is already dead.
	Kill(ctx context.Context) (killed int, err error)
	// Close releases the mode's resources. Idempotent. Pids and Kill
	// return ErrClosed afterwards.
	Close() error
}

// Modes, as Tree.Mode reports them.
const (
	ModeProc = "proc"
	ModeV2   = "v2"
)

var (
	// ErrClosed is returned (wrapped) by a Tree used after Close.
	ErrClosed = errors.New("process tree closed")
	// ErrReaperStopped is returned (wrapped) by Reaper.StartProcess after Stop.
	ErrReaperStopped = errors.New("reaper stopped")
	// ErrUnsupported is returned (wrapped) where the platform lacks the mechanism.
	ErrUnsupported = errors.New("not supported on this platform")
)

// ProcOption configures NewProcTree.
type ProcOption func(*procOptions)

type procOptions struct {
	exclude func(pid int) bool
}

// WithExclude keeps out of the tree the direct children of the supervisor
// for which exclude returns true (and their descendants), except the leader.
// Pass Reaper.Owns so that only the leader and re-parented orphans count:
// any other process the supervisor started is then left alone.
func WithExclude(exclude func(pid int) bool) ProcOption {
	return func(o *procOptions) { o.exclude = exclude }
}
