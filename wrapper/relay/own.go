package relay

import (
	"bytes"
	"encoding/json"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
)

// The messages the supervisor sends in its own name, signed with the
// session key: what a client would have had from the kernel, had the
// kernel lived to send it.

// TellRunningCell tells the client of the cell the kernel was running
// (the oldest unanswered execute_request) what happened: text on its
// stderr, an error execute_reply with evalue, and idle, all as replies to
// that request. It reports whether there was such a cell. id is the
// kernel id, for the iopub topics.
func (r *Relay) TellRunningCell(id, text, evalue string) bool {
	ex, ok := r.running()
	return r.TellCell(id, Cell{ex: ex, ok: ok}, text, evalue)
}

// TellCell is TellRunningCell for a cell Detach returned.
func (r *Relay) TellCell(id string, cell Cell, text, evalue string) bool {
	ex, ok := cell.ex, cell.ok
	if !ok {
		return false
	}
	if err := r.send(jmsg.IOPub, [][]byte{[]byte("kernel." + id + ".stream")}, "stream", ex.header, ex.sess,
		map[string]any{"name": "stderr", "text": text}); err != nil {
		r.log.Debug("cannot notify the cell", "err", err)
	}
	_ = r.send(jmsg.Shell, ex.idents, "execute_reply", ex.header, ex.sess, map[string]any{
		"status": "error", "ename": "KernelDied", "evalue": evalue,
		"traceback": []string{text}, "execution_count": nil,
	})
	_ = r.send(jmsg.IOPub, [][]byte{[]byte("kernel." + id + ".status")}, "status", ex.header, ex.sess,
		map[string]any{"execution_state": "idle"})
	return true
}

// WarnRunningCell shows text on stderr of the cell the kernel runs, if it
// runs one (it reports whether it did).
func (r *Relay) WarnRunningCell(id, text string) bool {
	ex, ok := r.running()
	if !ok {
		return false
	}
	if err := r.send(jmsg.IOPub, [][]byte{[]byte("kernel." + id + ".stream")}, "stream", ex.header, ex.sess,
		map[string]any{"name": "stderr", "text": text}); err != nil {
		r.log.Debug("cannot warn the cell", "err", err)
	}
	return true
}

// ReplyShutdown answers the client that sent req (a ShutdownRequest
// event) with the shutdown_reply the kernel did not get to send.
func (r *Relay) ReplyShutdown(req Event) {
	p, err := jmsg.Split(req.Frames)
	if err != nil {
		return
	}
	h, _ := jmsg.Header(p.Header)
	if err := r.send(jmsg.Control, p.Idents, "shutdown_reply", p.Header, h.Session,
		map[string]any{"status": "ok", "restart": req.Restart}); err != nil {
		r.log.Debug("cannot send shutdown_reply", "err", err)
	}
}

// BroadcastShutdown publishes the shutdown_reply to req on iopub, as
// ipykernel does for the other clients, unless the kernel did: ipykernel
// sends it only after it has terminated its children, which the tree
// kill may have cut short.
func (r *Relay) BroadcastShutdown(id string, req Event) {
	if r.shutdownBroadcast.Load() {
		return
	}
	p, err := jmsg.Split(req.Frames)
	if err != nil {
		return
	}
	h, _ := jmsg.Header(p.Header)
	if err := r.send(jmsg.IOPub, [][]byte{[]byte("kernel." + id + ".shutdown")}, "shutdown_reply", p.Header, h.Session,
		map[string]any{"status": "ok", "restart": req.Restart}); err != nil {
		r.log.Debug("cannot broadcast shutdown_reply", "err", err)
	}
}

// usageFilter wraps the filter of the kernel's control messages: a
// verified usage_reply is sent on with the supervisor's figures added
// (Hooks.Usage) and re-signed, in place of the kernel's; everything else,
// and a reply whose content is not a JSON object, goes on as it came.
func (r *Relay) usageFilter(next func([][]byte) bool) func([][]byte) bool {
	return func(frames [][]byte) bool {
		if !next(frames) {
			return false
		}
		p, ok := r.verified(frames, "usage_reply")
		if !ok {
			return true
		}
		var content map[string]any
		dec := json.NewDecoder(bytes.NewReader(p.Content))
		dec.UseNumber() // the kernel's figures go on exactly as it wrote them
		if dec.Decode(&content) != nil || content == nil {
			return true
		}
		r.hooks.Usage(content)
		b, err := json.Marshal(content)
		if err != nil {
			return true
		}
		if err := r.outer.doors[jmsg.Control].Send(r.signer.WithContent(p, b)); err != nil {
			r.log.Debug("cannot send usage_reply", "err", err)
		}
		return false
	}
}

// Publish sends a message of the supervisor's own on iopub to every
// subscriber, with no parent: msgType and content as given, the topic
// kernel.<id>.<msgType>, the session "tfgpu-kernel" (no client's).
// Jupyter's clients pass a msg_type they do not know on to their
// listeners (JupyterLab's iopubMessage signal).
func (r *Relay) Publish(id, msgType string, content any) error {
	return r.send(jmsg.IOPub, [][]byte{[]byte("kernel." + id + "." + msgType)}, msgType, nil, jmsg.Username, content)
}
