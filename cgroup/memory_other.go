//go:build !linux

package cgroup

import "fmt"

// Memory is a memory limit on a set of processes; see the Linux build.
type Memory interface {
	Limit() int64
	Add(pid int) error
	OOMKills() (int, error)
	Where() string
	Close() error
}

// NewMemoryLimit fails with ErrUnsupported.
func NewMemoryLimit(l Layout, name string, limit int64) (Memory, string, error) {
	return nil, "", fmt.Errorf("no memory limit: %w", ErrUnsupported)
}

// V2Memory is Linux-only.
type V2Memory struct{}

// NewV2Memory fails with ErrUnsupported.
func NewV2Memory(dir string, limit int64) (*V2Memory, error) {
	return nil, fmt.Errorf("memory limit: %w", ErrUnsupported)
}

// V1Memory is Linux-only.
type V1Memory struct{}

// NewV1Memory fails with ErrUnsupported.
func NewV1Memory(parent, name string, limit int64) (*V1Memory, error) {
	return nil, fmt.Errorf("memory limit: %w", ErrUnsupported)
}

var (
	_ Memory = (*V2Memory)(nil)
	_ Memory = (*V1Memory)(nil)
)

func (*V2Memory) Limit() int64           { return 0 }
func (*V2Memory) Add(int) error          { return fmt.Errorf("memory limit: %w", ErrUnsupported) }
func (*V2Memory) OOMKills() (int, error) { return 0, fmt.Errorf("memory limit: %w", ErrUnsupported) }
func (*V2Memory) Where() string          { return "" }
func (*V2Memory) Close() error           { return nil }
func (*V1Memory) Limit() int64           { return 0 }
func (*V1Memory) Add(int) error          { return fmt.Errorf("memory limit: %w", ErrUnsupported) }
func (*V1Memory) OOMKills() (int, error) { return 0, fmt.Errorf("memory limit: %w", ErrUnsupported) }
func (*V1Memory) Where() string          { return "" }
func (*V1Memory) Close() error           { return nil }
func (*V1Memory) SwapLimited() bool      { return false }
