package relay

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
)

// While the supervisor has parked its kernel (killed by `tfgpu-kernel stop`,
// an idle stop or the GPU memory limit, the supervisor's place kept:
// docs/design.md#parked-kernels), no kernel is attached and the relay
// answers what it can itself, so that Jupyter sees an idle kernel: the
// heartbeat, kernel_info_request (with the last kernel's reply),
// interrupt_request, comm_info_request (no comms) and usage_request (the
// supervisor's figures: nothing held). Only what a user does wakes a kernel
// (wakes): running a cell, completion, inspection, history; the
// supervisor is told (KernelWanted) and the request waits for the kernel it
// starts. Anything else a front end sends by itself (the debugger's
// debug_request when a notebook opens, a panel's polling) is answered with
// an error saying the kernel is stopped, so it starts nothing. What has no
// signature that verifies is dropped, as is stdin (no kernel asked).

// maxKernelInfo bounds the kernel_info_reply content kept for the parked
// replies.
const maxKernelInfo = 64 << 10

// keepKernelInfo keeps the content of a verified kernel_info_reply from
// the kernel, for the replies while parked.
func (r *Relay) keepKernelInfo(frames [][]byte) {
	p, ok := r.verified(frames, "kernel_info_reply")
	if !ok || len(p.Content) > maxKernelInfo {
		return
	}
	r.mu.Lock()
	r.kinfo = bytes.Clone(p.Content)
	r.mu.Unlock()
}

// kernelInfo is the content of the relay's own kernel_info_reply: the last
// kernel's, else enough for a client to take the kernel for ready.
func (r *Relay) kernelInfo() json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinfo != nil {
		return r.kinfo
	}
	b, _ := json.Marshal(map[string]any{"status": "ok", "protocol_version": "5.3",
		"implementation": "tfgpu-kernel", "implementation_version": "",
		"language_info": map[string]any{"name": "python"}, "banner": "", "help_links": []any{}})
	return b
}

// parked handles a client's message while no kernel is attached. It
// reports whether the message is to go to a kernel, which is attached by
// then; false when it was answered or dropped.
func (r *Relay) parked(ch jmsg.Channel, frames [][]byte) bool {
	if ch == jmsg.HB {
		// The heartbeat is an echo: the same frames back to the sender.
		_ = r.outer.doors[jmsg.HB].Send(frames)
		return false
	}
	if ch == jmsg.Stdin {
		return false
	}
	p, err := jmsg.Split(frames)
	if err != nil || !r.signer.Verify(p) {
		return false
	}
	h, err := jmsg.Header(p.Header)
	if err != nil {
		return false
	}
	switch {
	case h.MsgType == "kernel_info_request":
		r.answerParked(ch, p, h, "kernel_info_reply", r.kernelInfo())
		return false
	case ch == jmsg.Control && h.MsgType == "interrupt_request":
		r.answerParked(ch, p, h, "interrupt_reply", json.RawMessage(`{"status":"ok"}`))
		return false
	case ch == jmsg.Control && h.MsgType == "shutdown_request":
		return false // the supervisor answers it (inspectIn told it)
	case h.MsgType == "comm_info_request":
		r.answerParked(ch, p, h, "comm_info_reply", json.RawMessage(`{"status":"ok","comms":{}}`))
		return false
	case h.MsgType == "usage_request" && r.hooks.Usage != nil:
		content := map[string]any{}
		r.hooks.Usage(content)
		b, err := json.Marshal(content)
		if err == nil {
			r.answerParked(ch, p, h, "usage_reply", b)
		}
		return false
	case r.refusal != nil:
		r.refuseWith(ch, p, h, r.refusal.Ename, r.refusal.Evalue, r.refusal.Text, r.countCell(h, p.Content))
		return false
	case !wakes[h.MsgType]:
		r.refuse(ch, p, h, "KernelStopped", "the kernel is stopped; run a cell to start a fresh one")
		return false
	}
	if text, held := r.held(); held {
		r.refuse(ch, p, h, "KernelHeld", text)
		return false
	}
	if !r.waitForKernel() {
		return false
	}
	r.waitWarm()
	if h.MsgType == "execute_request" {
		// The notice of why the kernel was parked may have been left
		// after this request came (the release is confirmed first).
		r.warnCell(p, h)
	}
	return true
}

// wakes are the requests a user's action sends, which start a fresh kernel
// in a parked one's place.
var wakes = map[string]bool{"execute_request": true, "complete_request": true, "inspect_request": true,
	"is_complete_request": true, "history_request": true}

// answerParked sends the reply to a request, between the busy and idle
// statuses a kernel publishes around each (jupyter_server waits for an
// iopub message before it takes a kernel for connected).
func (r *Relay) answerParked(ch jmsg.Channel, p jmsg.Parts, h jmsg.MsgHeader, replyType string, content json.RawMessage) {
	r.mu.Lock()
	id := r.warnID
	r.mu.Unlock()
	topic := [][]byte{[]byte("kernel." + id + ".status")}
	_ = r.send(jmsg.IOPub, topic, "status", p.Header, h.Session, map[string]any{"execution_state": "busy"})
	if err := r.send(ch, p.Idents, replyType, p.Header, h.Session, content); err != nil {
		r.log.Debug("cannot answer while parked", "msg_type", replyType, "err", err)
	}
	_ = r.send(jmsg.IOPub, topic, "status", p.Header, h.Session, map[string]any{"execution_state": "idle"})
}

// waitForKernel asks the supervisor for a kernel, once until one is
// attached, and waits for it. It reports false when the relay closes
// first.
func (r *Relay) waitForKernel() bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	ask := !r.wanted
	r.wanted = true
	attached := r.attached
	r.mu.Unlock()
	if ask {
		select {
		case r.events <- Event{Kind: KernelWanted}:
		case <-r.ctx.Done():
			return false
		}
	}
	select {
	case <-attached:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// SetKernelID names the kernel for the topics of the relay's own iopub
// messages.
func (r *Relay) SetKernelID(id string) {
	r.mu.Lock()
	r.warnID = id
	r.mu.Unlock()
}

// Nudges: a fresh kernel's output to the first request would be lost if
// the relay's iopub subscription has not reached the kernel's PUB yet (a
// SUB misses what is published before). As jupyter_server does for its
// clients, the relay sends kernel_info_requests of its own until a message
// from the kernel comes on iopub; their replies go to no client.
const (
	nudgeEvery = 200 * time.Millisecond
	nudgeFor   = 60 * time.Second
)

// nudgeIdent is the routing identity of the relay's own requests: no
// client's (a zero byte first), so their replies are dropped at the door.
var nudgeIdent = []byte("\x00tfgpu-nudge")

// waitWarm waits until the attached kernel's iopub is known to reach the
// relay, nudging it, within nudgeFor.
func (r *Relay) waitWarm() {
	g := r.gen.Load()
	if g == nil {
		return
	}
	t := time.NewTicker(nudgeEvery)
	defer t.Stop()
	deadline := time.After(nudgeFor)
	for {
		frames, err := jmsg.NewMessage(r.signer, [][]byte{nudgeIdent}, "kernel_info_request", nil, jmsg.Username, map[string]any{})
		if err == nil {
			go func() { _ = g.links[jmsg.Shell].Send(frames) }() // waits for the connection
		}
		select {
		case <-g.warm:
			return
		case <-g.ctx.Done():
			return
		case <-deadline:
			r.log.Debug("the fresh kernel's iopub said nothing to the nudges", "waited", nudgeFor)
			return
		case <-t.C:
		}
	}
}

// A hold keeps a parked kernel down (`tfgpu-kernel stop --hold`): a
// request that needs a kernel is answered with an error saying so, until
// the hold ends.
type hold struct {
	until time.Time // zero: until lifted
	text  string    // for the user
}

// SetHold holds the parked kernel down until until (zero: until SetHold
// is called with text ""), telling the user text; "" lifts the hold.
func (r *Relay) SetHold(until time.Time, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if text == "" {
		r.hold = nil
		return
	}
	r.hold = &hold{until: until, text: text}
}

// held returns the hold's text while it holds.
func (r *Relay) held() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold == nil || (!r.hold.until.IsZero() && !time.Now().Before(r.hold.until)) {
		return "", false
	}
	return r.hold.text, true
}

// refuse answers a request no kernel will serve (held down, or one that
// does not start a kernel): for a cell the text on its stderr, and an
// error reply with ename, between busy and idle; the cell is not counted
// as running.
func (r *Relay) refuse(ch jmsg.Channel, p jmsg.Parts, h jmsg.MsgHeader, ename, text string) {
	r.refuseWith(ch, p, h, ename, strings.TrimSpace(text), text, nil)
}

// refuseWith is refuse with the reply's evalue apart from the cell's text,
// and its execution_count (nil: none).
func (r *Relay) refuseWith(ch jmsg.Channel, p jmsg.Parts, h jmsg.MsgHeader, ename, evalue, text string, count any) {
	r.mu.Lock()
	id := r.warnID
	r.forgetExecLocked(h.MsgID)
	r.mu.Unlock()
	topic := func(t string) [][]byte { return [][]byte{[]byte("kernel." + id + "." + t)} }
	_ = r.send(jmsg.IOPub, topic("status"), "status", p.Header, h.Session, map[string]any{"execution_state": "busy"})
	if h.MsgType == "execute_request" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	if h.MsgType == "execute_request" {
		_ = r.send(jmsg.IOPub, topic("stream"), "stream", p.Header, h.Session, map[string]any{"name": "stderr", "text": text})
	}
	replyType := strings.TrimSuffix(h.MsgType, "_request") + "_reply"
	_ = r.send(ch, p.Idents, replyType, p.Header, h.Session, map[string]any{"status": "error",
		"ename": ename, "evalue": evalue, "traceback": []string{text}, "execution_count": count})
	_ = r.send(jmsg.IOPub, topic("status"), "status", p.Header, h.Session, map[string]any{"execution_state": "idle"})
}
