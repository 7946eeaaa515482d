package record

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
)

// The restart handoff: the supervisor of a restarted kernel kills its tree
// and exits at once (jupyter_client is waiting for it), leaving what it
// knew of the tree in <state dir>/<kernel id>.gpu; the next supervisor of
// that kernel confirms the release before it spawns the new kernel
// (docs/design.md#gpu-confirmation).
func handoffName(id string) string { return id + ".gpu" }

// WriteHandoff leaves old for the next supervisor of kernel id.
func (d *Dir) WriteHandoff(id string, old *gpu.Old) error {
	b, err := json.Marshal(old)
	if err != nil {
		return err
	}
	return d.write(handoffName(id), b)
}

// TakeHandoff returns and removes the handoff for kernel id; nil and no
// error when there is none.
func (d *Dir) TakeHandoff(id string) (*gpu.Old, error) {
	b, err := d.read(handoffName(id))
	if err != nil {
		return nil, nil
	}
	_ = d.remove(handoffName(id))
	var old gpu.Old
	if err := json.Unmarshal(b, &old); err != nil {
		return nil, fmt.Errorf("unreadable GPU handoff %s: %w", filepath.Join(d.path, handoffName(id)), err)
	}
	return &old, nil
}

// Handoff is a GPU check a supervisor left unfinished.
type Handoff struct {
	KernelID string
	Old      gpu.Old
}

// Handoffs lists the readable handoffs in d.
func (d *Dir) Handoffs() []Handoff {
	names, _ := d.names(".gpu")
	var out []Handoff
	for _, name := range names {
		b, err := d.read(name)
		var old gpu.Old
		if err != nil || json.Unmarshal(b, &old) != nil {
			continue
		}
		out = append(out, Handoff{KernelID: strings.TrimSuffix(name, ".gpu"), Old: old})
	}
	return out
}

// DropHandoff removes the handoff of kernel id (its memory is back).
func (d *Dir) DropHandoff(id string) { _ = d.remove(handoffName(id)) }
