//go:build !linux

package cgroup

import (
	"context"
	"fmt"
)

// ModeV1 is the cgroup v1 freezer mode, as Tree.Mode reports it.
const ModeV1 = "v1"

// V1Tree is Linux-only; NewV1Tree fails with ErrUnsupported.
type V1Tree struct{ unsupportedTree }

var _ Tree = (*V1Tree)(nil)

// V1SelfDir is Linux-only.
func V1SelfDir(l Layout, controller string) (string, error) {
	return "", fmt.Errorf("find own %s cgroup: %w", controller, ErrUnsupported)
}

// NewV1Tree fails with ErrUnsupported.
func NewV1Tree(ctx context.Context, freezerParent, pidsParent, name string, sweep ...ProcOption) (*V1Tree, error) {
	return nil, fmt.Errorf("create v1 cgroup: %w", ErrUnsupported)
}

func (t *V1Tree) Dir() string     { return "" }
func (t *V1Tree) PidsDir() string { return "" }
func (t *V1Tree) Mode() string    { return ModeV1 }

// TaskCount is Linux-only.
func (t *V1Tree) TaskCount() (int, error) {
	return 0, fmt.Errorf("count tasks: %w", ErrUnsupported)
}

// FreezerState fails with ErrUnsupported.
func FreezerState(dir string) (string, error) {
	return "", fmt.Errorf("read %s/freezer.state: %w", dir, ErrUnsupported)
}
