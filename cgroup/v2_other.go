//go:build !linux

package cgroup

import (
	"context"
	"fmt"
)

// V2Tree is Linux-only; NewV2Tree fails with ErrUnsupported.
type V2Tree struct{ unsupportedTree }

var _ Tree = (*V2Tree)(nil)

// V2Option configures NewV2Tree.
type V2Option func()

// WithoutCloneInto is Linux-only.
func WithoutCloneInto() V2Option { return func() {} }

// NewV2Tree fails with ErrUnsupported.
func NewV2Tree(ctx context.Context, parent, name string, opts ...V2Option) (*V2Tree, error) {
	return nil, fmt.Errorf("create cgroup: %w", ErrUnsupported)
}

// AdoptV2 fails with ErrUnsupported.
func AdoptV2(dir string) (*V2Tree, error) {
	return nil, fmt.Errorf("adopt cgroup %s: %w", dir, ErrUnsupported)
}

func (t *V2Tree) Dir() string  { return "" }
func (t *V2Tree) Mode() string { return ModeV2 }

// Leftovers is Linux-only.
func (t *V2Tree) Leftovers() int { return 0 }

// DestroyV2 fails with ErrUnsupported.
func DestroyV2(ctx context.Context, dir string) (int, error) {
	return 0, fmt.Errorf("kill cgroup %s: %w", dir, ErrUnsupported)
}
