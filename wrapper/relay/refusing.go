package relay

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
)

// A relay that refuses (docs/design.md#bad-settings): `run`'s settings are
// bad, so no kernel is started and none will be attached, but the clients
// are answered as a parked kernel's are (parked.go), so that Jupyter takes
// the kernel for ready and the user's cell shows why nothing runs, instead
// of a kernel that dies at once and a server that restarts it until it
// gives up. Every request a parked relay would wake a kernel for, and every
// other one it does not answer itself, gets the refusal; a
// shutdown_request is the supervisor's to answer (it then exits).

// A Refusal is what a refusing relay answers with.
type Refusal struct {
	Ename  string // the error's name, e.g. TFGPUSettingsError
	Evalue string // the reply's evalue: one line
	Text   string // what the cell shows on its stderr; also kernel_info's banner
}

// NewRefusing starts a relay on outer that never has a kernel and answers
// every request that needs one with ref. Verified shutdown_requests are
// sent to events, as New's are.
func NewRefusing(ctx context.Context, outer *Outer, signer *jmsg.Signer, events chan<- Event, ref Refusal, lg *slog.Logger) *Relay {
	r := newRelay(ctx, outer, signer, events, Hooks{}, lg)
	r.refusal = &ref
	// jupyter console prints the banner when it connects.
	r.kinfo, _ = json.Marshal(map[string]any{"status": "ok", "protocol_version": "5.3",
		"implementation": "tfgpu-kernel", "implementation_version": "",
		"language_info": map[string]any{"name": "python"}, "banner": ref.Text, "help_links": []any{}})
	r.startOuter()
	return r
}

// countCell is the execution_count a kernel's reply to request h would
// carry: its counter, one more for each cell that stores history (the
// messaging spec's execute_reply), as if every cell had failed in the
// kernel. A client may do arithmetic on it: jupyter console 6.6 adds 1 to
// it and ended its session on the null a held kernel's reply carries.
// Nil for a request that is not a cell.
func (r *Relay) countCell(h jmsg.MsgHeader, content []byte) any {
	if h.MsgType != "execute_request" {
		return nil
	}
	c := struct {
		Silent       bool  `json:"silent"`
		StoreHistory *bool `json:"store_history"`
	}{}
	_ = json.Unmarshal(content, &c)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !c.Silent && (c.StoreHistory == nil || *c.StoreHistory) {
		r.cells++
	}
	return r.cells
}
