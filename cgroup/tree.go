package cgroup

import (
	"context"
	"errors"
	"syscall"
)

// Tree is the containment of one kernel's process tree. Implementations:
// proc (NewProcTree), cgroup v2 (NewV2Tree), the v1 freezer (NewV1Tree) and
// the systemd scope (Open with ModeSystemd). Open picks one. See the
// package doc for the order of calls.
type Tree interface {
	// Mode names the mechanism: ModeProc, ModeV2, ModeV1 or ModeSystemd.
	Mode() string
	// Dir is the tree's cgroup directory; "" for the proc mode, and for a
	// systemd scope before the leader reported it.
	Dir() string
	// Configure prepares attr for spawning the leader: it sets the fields
	// the mode owns (Setpgid and Pgid; the cgroup fd) and no others.
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

// Modes, as Tree.Mode reports them (ModeV1 is in v1_linux.go).
const (
	ModeProc    = "proc"
	ModeV2      = "v2"
	ModeSystemd = "systemd"
)

// What --cgroup accepts besides the modes: Auto takes the first of v2,
// systemd, v1 and proc that can be set up.
const Auto = "auto"

// oldProcName is the old spelling of ModeProc, the proc mode's name before
// #24 ("none" in the flag): still read by Choice, and by Choice alone, so
// that kernelspecs installed with it keep working; the mode has one name,
// ModeProc, everywhere else.
const oldProcName = "none"

// Choices are the values Open accepts, in the order Auto tries them.
var Choices = []string{Auto, ModeV2, ModeSystemd, ModeV1, ModeProc}

// Choice is c with the old spelling oldProcName read as ModeProc; ok is false
// for a value Open does not take.
func Choice(c string) (string, bool) {
	if c == oldProcName {
		c = ModeProc
	}
	for _, k := range Choices {
		if c == k {
			return c, true
		}
	}
	return c, false
}

// Launcher is a Tree that starts the leader through another program: the
// systemd scope, made by systemd-run around the command. The caller runs
// what Launch returns instead of the leader's own path and argv; after
// Started, Err says why the leader is not in the promised containment (the
// caller then kills what was started and falls back, see Fallback), and
// Memory is the memory limit the launcher applied, if one was asked for.
type Launcher interface {
	Tree
	Launch(path string, argv []string, files []uintptr) (string, []string, []uintptr, error)
	Err() error
	Memory() (Memory, error)
}

var (
	// ErrClosed is returned (wrapped) by a Tree used after Close.
	ErrClosed = errors.New("process tree closed")
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
// Pass proc.Reaper.Owns so that only the leader and re-parented orphans count:
// any other process the supervisor started is then left alone.
func WithExclude(exclude func(pid int) bool) ProcOption {
	return func(o *procOptions) { o.exclude = exclude }
}
