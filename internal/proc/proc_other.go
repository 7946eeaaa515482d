//go:build !linux

package proc

import (
	"fmt"
	"syscall"
	"time"
)

// The supervisor runs on Linux only. This stub lets the module build and
// `go vet` run elsewhere; every call fails with ErrUnsupported.

// SetChildSubreaper is Linux-only.
func SetChildSubreaper() error { return fmt.Errorf("set child subreaper: %w", ErrUnsupported) }

// ExitStatus is how one child ended.
type ExitStatus struct {
	Pid    int
	Status syscall.WaitStatus
}

func (e ExitStatus) String() string { return fmt.Sprintf("wait status %v", e.Status) }

// Code is -1: statuses are not decoded on this platform.
func (e ExitStatus) Code() int { return -1 }

// Reaper is Linux-only; StartProcess fails with ErrUnsupported.
type Reaper struct{}

// StartReaper returns a Reaper that starts nothing.
func StartReaper() *Reaper { return &Reaper{} }

func (r *Reaper) StartProcess(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan ExitStatus, error) {
	return 0, nil, fmt.Errorf("start %s: %w", argv0, ErrUnsupported)
}
func (r *Reaper) Owns(pid int) bool        { return false }
func (r *Reaper) Orphans() uint64          { return 0 }
func (r *Reaper) Stop()                    {}
func (r *Reaper) Drain(time.Duration) bool { return true }

// StartTime fails with ErrUnsupported.
func StartTime(pid int) (uint64, error) {
	return 0, fmt.Errorf("start time of %d: %w", pid, ErrUnsupported)
}

// Cmdline fails with ErrUnsupported.
func Cmdline(pid int) ([]string, error) {
	return nil, fmt.Errorf("command line of %d: %w", pid, ErrUnsupported)
}

// HasChildren reports false: there is no /proc to read.
func HasChildren(pid int) bool { return false }
