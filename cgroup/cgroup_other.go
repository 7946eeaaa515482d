//go:build !linux

package cgroup

import (
	"context"
	"fmt"
	"syscall"
)

// The supervisor runs on Linux only. This stub lets the module build and
// `go vet` run elsewhere; every call fails with ErrUnsupported.

// NewProcTree returns a Tree whose calls fail with ErrUnsupported.
func NewProcTree(supervisorPID int, opts ...ProcOption) Tree { return unsupportedTree{} }

type unsupportedTree struct{}

var _ Tree = unsupportedTree{}

func (unsupportedTree) Mode() string { return ModeProc }
func (unsupportedTree) Dir() string  { return "" }
func (unsupportedTree) Configure(*syscall.SysProcAttr) error {
	return fmt.Errorf("configure proc tree: %w", ErrUnsupported)
}
func (unsupportedTree) Started(int) {}
func (unsupportedTree) Pids() ([]int, error) {
	return nil, fmt.Errorf("list process tree: %w", ErrUnsupported)
}
func (unsupportedTree) Kill(context.Context) (int, error) {
	return 0, fmt.Errorf("kill process tree: %w", ErrUnsupported)
}
func (unsupportedTree) Close() error { return nil }

// OuterMemory is Linux-only; NewOuterMemory finds none elsewhere.
type OuterMemory struct {
	Limit int64
	Dir   string
}

func NewOuterMemory(Layout) *OuterMemory { return nil }
func (o *OuterMemory) Baseline()         {}
func (o *OuterMemory) Of() (int64, string) {
	if o == nil {
		return 0, ""
	}
	return o.Limit, o.Dir
}
func (o *OuterMemory) Hit() bool { return false }
