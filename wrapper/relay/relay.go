package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

// Relay moves every frame between the sockets Jupyter's clients connect to
// (outer) and the kernel's own sockets (inner), untouched:
//
//	shell, control, stdin: outer ROUTER  <->  inner DEALER
//	iopub:                 inner SUB      ->  outer PUB
//	hb:                    outer ROUTER  <->  inner DEALER (ipykernel echoes
//	                       on a ROUTER, so the client's identity frame rides
//	                       along and routes the echo back)
//
// A ROUTER prefixes the client's identity; the DEALER passes it on, the
// kernel's ROUTER prefixes the DEALER's identity, and replies unwind the same
// way. ipykernel sends input_request on stdin to the identities of the shell
// request (ipykernel/kernelbase.py _input_request), so the inner shell and
// stdin DEALERs share one identity.
//
// The relay only looks at headers of control and shell messages, and acts
// (reports to the supervisor) only on messages whose HMAC verifies.
type Relay struct {
	log    *slog.Logger
	signer *jmsg.Signer
	outer  *Outer
	ctx    context.Context // the relay's life: the outer pumps'
	cancel context.CancelFunc

	// gen is the kernel the relay talks to now; nil while the supervisor
	// has parked it (stopped, its place kept: parked.go). attached is
	// closed when a kernel is attached, and replaced when it is detached.
	gen      atomic.Pointer[generation]
	attached chan struct{}
	closed   bool   // CloseInner: no kernel will be attached again
	wanted   bool   // a KernelWanted event was sent since the last attach
	kinfo    []byte // the content of the last kernel's kernel_info_reply
	hold     *hold  // while parked: requests that need a kernel are refused (parked.go)
	// refusal: no kernel will ever be attached (NewRefusing); set before
	// the pumps start and never changed.
	refusal *Refusal

	// events reports verified requests the supervisor acts on.
	events chan<- Event
	hooks  Hooks

	welcome  *welcomer                      // iopub_welcome for clients (welcome.go)
	history  *digestHistory                 // signatures of requests acted on
	warnPeer func(msg string, attrs ...any) // rate-limited: peers can flood

	mu      sync.Mutex
	execs   []execRequest // execute_requests sent to the kernel, not yet answered
	warning string        // for the next execute_request, on its stderr (warnNextCell)
	warnID  string        // the kernel id for the warning's topic
	cells   int           // refusing: the cells that stored history, its execution_count (refusing.go)

	// shutdownRequested: a verified shutdown_request went to the kernel;
	// shutdownBroadcast: the kernel then published its shutdown_reply on
	// iopub.
	shutdownRequested, shutdownBroadcast atomic.Bool

	explained string // the request whose error was explained last (iopub pump only)
}

// A generation is one kernel's side of the relay: the inner sockets
// dialled to it and their pumps, until the kernel is detached.
type generation struct {
	inner  [5]zmq4.Socket // the kernel's messages are received here
	links  [5]*zmtp.Link  // and messages to the kernel sent here
	ctx    context.Context
	cancel context.CancelFunc
	// ready is closed when the first message from the kernel arrives: by
	// then ipykernel has installed its signal handlers.
	ready     chan struct{}
	readyOnce sync.Once
	// warm is closed when the first message from the kernel comes on
	// iopub: the relay's subscription has reached the kernel's PUB.
	warm     chan struct{}
	warmOnce sync.Once
}

// dialRetry is how long an inner socket waits between tries to reach the
// kernel while it starts.
const dialRetry = 20 * time.Millisecond

// digestHistorySize bounds the signatures remembered against replays
// (about 100 bytes each).
const digestHistorySize = 16384

// Hooks are called by the relay's pumps, inline: each must be cheap and
// must not block. A nil hook is not called.
type Hooks struct {
	// Activity is called when the kernel becomes busy (a verified
	// execute_request while none was unanswered) and idle again (the reply
	// to the last one).
	Activity func(busy bool)
	// Usage is given the content of each verified usage_reply of the
	// kernel (jupyter-resource-usage's question) to add its figures to;
	// the reply goes on re-signed. It may take a few milliseconds.
	Usage func(content map[string]any)
	// CellError is given the content of a verified error message on
	// iopub (ename, evalue, traceback) and returns text for the cell's
	// stderr after it, or "" for none. It runs on the iopub pump, which
	// waits for it: it is called for errors only, and may take a few
	// milliseconds (the GPU out-of-memory explanation asks NVML).
	CellError func(content []byte) string
}

// Event is what the relay tells the supervisor's loop.
type Event struct {
	Kind    EventKind
	Frames  [][]byte // the outer message, idents included
	Restart bool     // of a shutdown_request
}

// EventKind says what happened.
type EventKind int

const (
	ShutdownRequest   EventKind = iota // a verified shutdown_request went to the kernel
	ShutdownReply                      // the kernel's shutdown_reply went to the client
	ShutdownBroadcast                  // the kernel's shutdown_reply on iopub, its last word, went out
	KernelWanted                       // parked: a client's request needs a kernel (parked.go)
)

// execRequest is enough of an execute_request to answer it if the kernel
// dies while running it.
type execRequest struct {
	msgID  string
	idents [][]byte
	header []byte
	sess   string
}

// outerType is the socket type of an outer socket.
func outerType(ch jmsg.Channel) string {
	if ch == jmsg.IOPub {
		return "PUB"
	}
	return "ROUTER"
}

// Outer are the five sockets Jupyter's clients connect to, each a
// zmtp.Door that checks every peer (docs/local-peers.md).
type Outer struct {
	doors [5]*zmtp.Door
}

// Bind binds the five sockets the connection file asks for. Failure
// names the channel and endpoint.
func Bind(ci *jmsg.ConnInfo, sh *zmtp.Shared) (*Outer, error) {
	o := &Outer{}
	for _, ch := range jmsg.Channels {
		ep := ci.Endpoint(ch)
		d, err := zmtp.Bind(outerType(ch), ch.String(), ep, sh, ch == jmsg.IOPub)
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("cannot listen on %s port (%s): %w", ch, ep, unwrapListen(err))
		}
		if ch == jmsg.Stdin {
			// ipykernel asks for input with the shell connection's
			// identity: a client's stdin slot may differ (zmtp.Door.Send).
			d.RouteToAnySlot()
		}
		o.doors[ch] = d
	}
	return o, nil
}

// Close closes the sockets.
func (o *Outer) Close() {
	for _, d := range o.doors {
		if d != nil {
			d.Close()
		}
	}
}

// Drain waits, up to timeout, until the replies queued for clients are
// written, and reports whether they were (see zmtp.Drain).
func (o *Outer) Drain(timeout time.Duration) bool { return zmtp.Drain(timeout, o.doors[:]...) }

// unwrapListen strips the prefixes so the user sees "address already in use".
func unwrapListen(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

func closeAll(socks []zmq4.Socket) {
	for _, s := range socks {
		if s != nil {
			s.Close()
		}
	}
}

// New starts relaying between outer and the kernel's sockets in inner. The
// inner sockets dial the kernel in the background with unlimited retries
// (ipykernel takes about a second to bind; zmq4's default 10 × 250 ms is
// too short), until the kernel is detached. Verified requests the
// supervisor acts on are sent to events.
func New(ctx context.Context, outer *Outer, inner *jmsg.ConnInfo, signer *jmsg.Signer, events chan<- Event, hooks Hooks, lg *slog.Logger) *Relay {
	r := newRelay(ctx, outer, signer, events, hooks, lg)
	// The kernel first: a client's request that came before it would be
	// answered as if the kernel were parked (parked.go).
	r.Attach(inner)
	r.startOuter()
	return r
}

// newRelay is a relay with no kernel attached and no pump running.
func newRelay(ctx context.Context, outer *Outer, signer *jmsg.Signer, events chan<- Event, hooks Hooks, lg *slog.Logger) *Relay {
	ctx, cancel := context.WithCancel(ctx)
	r := &Relay{log: lg, signer: signer, outer: outer, ctx: ctx, cancel: cancel, events: events, hooks: hooks,
		attached: make(chan struct{}), history: newDigestHistory(digestHistorySize),
		warnPeer: zmtp.RateLimitedWarn(lg, 10*time.Second)}
	r.welcome = newWelcomer(r, outer.doors[jmsg.IOPub])
	return r
}

// startOuter starts reading the clients' messages.
func (r *Relay) startOuter() {
	for _, ch := range []jmsg.Channel{jmsg.Shell, jmsg.Control, jmsg.Stdin, jmsg.HB} {
		go r.outerPump(ch, r.inspectIn(ch))
	}
}

// Attach starts talking to a kernel through the inner connection inner:
// its sockets dial it, its messages go to the clients, and the clients'
// to it (those that waited for a kernel first).
func (r *Relay) Attach(inner *jmsg.ConnInfo) {
	ctx, cancel := context.WithCancel(r.ctx)
	g := &generation{ctx: ctx, cancel: cancel, ready: make(chan struct{}), warm: make(chan struct{})}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	shared := zmq4.SocketIdentity("tfgpu-" + hex.EncodeToString(idb[:]))
	zl := zmqLogger(r.log)
	opts := func(extra ...zmq4.Option) []zmq4.Option {
		return append([]zmq4.Option{zmq4.WithLogger(zl), zmq4.WithDialerMaxRetries(-1),
			zmq4.WithDialerRetry(dialRetry)}, extra...)
	}
	g.inner[jmsg.Shell] = zmq4.NewDealer(ctx, opts(zmq4.WithID(shared))...)
	g.inner[jmsg.Stdin] = zmq4.NewDealer(ctx, opts(zmq4.WithID(shared))...)
	g.inner[jmsg.Control] = zmq4.NewDealer(ctx, opts()...)
	g.inner[jmsg.HB] = zmq4.NewDealer(ctx, opts()...)
	sub := zmq4.NewSub(ctx, opts()...)
	_ = sub.SetOption(zmq4.OptionSubscribe, "")
	g.inner[jmsg.IOPub] = sub
	for _, ch := range jmsg.Channels {
		g.links[ch] = zmtp.NewLink(ctx, "kernel's "+ch.String())
		go r.dial(g, ch, inner.Endpoint(ch))
	}
	iopub := r.outer.doors[jmsg.IOPub]
	fromKernel := r.fromKernel(g, func([][]byte) {
		// A client that lags but reads holds up the kernel's output
		// rather than losing it (see zmtp.Limits).
		iopub.WaitRoom(ctx)
	})
	go r.pump(ctx, jmsg.IOPub, g.inner[jmsg.IOPub], iopub, func(frames [][]byte) bool {
		g.warmOnce.Do(func() { close(g.warm) })
		// The kernel's welcome is the relay's, not any client's (welcome.go),
		// and says nothing of whether the kernel is ready.
		if r.welcome.fromKernel(frames) {
			return false
		}
		fromKernel(frames)
		return true
	}, r.afterIOPub)
	for _, ch := range []jmsg.Channel{jmsg.Shell, jmsg.Control, jmsg.Stdin, jmsg.HB} {
		out := forward(r.fromKernel(g, r.inspectOut(ch)))
		if ch == jmsg.Control && r.hooks.Usage != nil {
			out = r.usageFilter(out)
		}
		go r.pump(ctx, ch, g.inner[ch], r.outer.doors[ch], out, r.sentOut(ch))
	}
	r.shutdownRequested.Store(false)
	r.shutdownBroadcast.Store(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		cancel()
		closeAll(g.inner[:])
		return
	}
	r.gen.Store(g)
	r.wanted = false
	close(r.attached)
}

// Detach stops talking to the kernel (about to be killed: parked, or
// stopping): its inner sockets close; the clients' requests from now on
// wait for the next kernel or are answered by the relay (parked.go). It
// returns the cell the kernel was running, for TellCell; what else the
// kernel ran is forgotten.
func (r *Relay) Detach() Cell {
	r.mu.Lock()
	g := r.gen.Swap(nil)
	if g != nil {
		r.attached = make(chan struct{})
	}
	var cell Cell
	if len(r.execs) > 0 {
		cell = Cell{ex: r.execs[0], ok: true}
	}
	r.execs = nil
	r.mu.Unlock()
	if g != nil {
		g.cancel()
		closeAll(g.inner[:])
	}
	return cell
}

// A Cell is a cell a detached kernel was running (Detach).
type Cell struct {
	ex execRequest
	ok bool
}

// afterIOPub sees each kernel message once it is queued for iopub's
// clients. After a shutdown_request only (the check would cost every
// message of a running kernel a split of its frames), the kernel's
// shutdown_reply there is its last word: the supervisor need not wait for
// it to exit by itself (docs/design.md#shutdown-and-restart).
func (r *Relay) afterIOPub(frames [][]byte) {
	if r.hooks.CellError != nil && len(frames) > 0 && bytes.HasSuffix(frames[0], errorTopic) {
		r.explainError(frames)
	}
	if !r.shutdownRequested.Load() || r.shutdownBroadcast.Load() {
		return
	}
	if _, ok := r.verified(frames, "shutdown_reply"); ok {
		r.shutdownBroadcast.Store(true)
		select {
		case r.events <- Event{Kind: ShutdownBroadcast, Frames: frames}:
		case <-r.ctx.Done():
		}
	}
}

// errorTopic ends the topic ipykernel publishes an error under
// ("kernel.<id>.error"): one comparison with the first frame is all an
// iopub message that is not an error costs (the relay's benchmark).
var errorTopic = []byte(".error")

// explainError gives a verified error message's content to the CellError
// hook and publishes what it returns on the same cell's stderr, right
// after the error and so before the kernel's idle (the iopub pump waits
// for it). Once per cell: a kernel that prints many errors for one
// request gets one explanation.
func (r *Relay) explainError(frames [][]byte) {
	p, ok := r.verified(frames, "error")
	if !ok {
		return
	}
	parent, err := jmsg.Header(p.Parent)
	if err != nil || parent.MsgID == "" || parent.MsgID == r.explained {
		return
	}
	text := r.hooks.CellError(p.Content)
	if text == "" {
		return
	}
	r.explained = parent.MsgID
	h, _ := jmsg.Header(p.Header)
	topic := bytes.TrimSuffix(frames[0], errorTopic)
	topic = append(topic[:len(topic):len(topic)], ".stream"...)
	if err := r.send(jmsg.IOPub, [][]byte{topic}, "stream", p.Parent, h.Session,
		map[string]any{"name": "stderr", "text": text}); err != nil {
		r.log.Debug("cannot explain the cell's error", "err", err)
	}
}

// sender is where a pump sends: a door (to clients) or a link (to the
// kernel).
type sender interface{ Send(frames [][]byte) error }

// forward makes an inspection hook a pump's filter that forwards all.
func forward(inspect func([][]byte)) func([][]byte) bool {
	return func(frames [][]byte) bool {
		if inspect != nil {
			inspect(frames)
		}
		return true
	}
}

func (r *Relay) dial(g *generation, ch jmsg.Channel, ep string) {
	zep, err := g.links[ch].Endpoint(ep)
	if err == nil {
		err = g.inner[ch].Dial(zep)
	}
	if err != nil && g.ctx.Err() == nil {
		r.log.Error("cannot connect to the kernel", "channel", ch.String(), "endpoint", ep, "err", err)
	}
}

// pump copies messages from src to dst until the relay closes. filter sees
// each message before it is sent, and says whether to send it; sent, when
// not nil, sees it after. Neither may keep or modify it.
func (r *Relay) pump(ctx context.Context, ch jmsg.Channel, src zmq4.Socket, dst sender, filter func([][]byte) bool, sent func([][]byte)) {
	for {
		msg, err := src.Recv()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Debug("relay stopped", "channel", ch.String(), "err", err)
			}
			return
		}
		// ZMTP commands (a libzmq peer's heartbeat PING) surface as messages
		// in zmq4 v0.17.0; they belong to the connection, not the kernel.
		if msg.Type == zmq4.CmdMsg || len(msg.Frames) == 0 {
			continue
		}
		if !filter(msg.Frames) {
			continue
		}
		if err := dst.Send(msg.Frames); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Debug("relay send failed", "channel", ch.String(), "err", err)
			continue
		}
		if sent != nil {
			sent(msg.Frames)
		}
	}
}

// outerPump reads the clients' messages of ch until the outer sockets
// close, and sends each to the kernel attached now (waiting for its
// connection), or, with none, to parked (parked.go).
func (r *Relay) outerPump(ch jmsg.Channel, inspect func([][]byte)) {
	src := r.outer.doors[ch]
	for {
		frames, err := src.Recv(r.ctx)
		if err != nil {
			if r.ctx.Err() == nil {
				r.log.Debug("relay stopped", "channel", ch.String(), "err", err)
			}
			return
		}
		if inspect != nil {
			inspect(frames)
		}
		r.toKernel(ch, frames)
	}
}

// toKernel sends a client's message to the kernel. A kernel detached while
// the send waited for its connection passes it on to the next, or to
// parked.
func (r *Relay) toKernel(ch jmsg.Channel, frames [][]byte) {
	for r.ctx.Err() == nil {
		g := r.gen.Load()
		if g == nil {
			if !r.parked(ch, frames) {
				return
			}
			continue // a kernel is attached now
		}
		err := g.links[ch].Send(frames)
		if err == nil || g.ctx.Err() == nil {
			if err != nil {
				r.log.Debug("relay send failed", "channel", ch.String(), "err", err)
			}
			return
		}
	}
}

// inspectIn returns the hook for client → kernel messages of ch.
func (r *Relay) inspectIn(ch jmsg.Channel) func([][]byte) {
	switch ch {
	case jmsg.Control:
		return func(frames [][]byte) {
			p, ok := r.request(frames, "shutdown_request")
			if !ok {
				return
			}
			var c struct {
				Restart bool `json:"restart"`
			}
			_ = json.Unmarshal(p.Content, &c)
			r.shutdownRequested.Store(true)
			r.events <- Event{Kind: ShutdownRequest, Frames: frames, Restart: c.Restart}
		}
	case jmsg.Shell:
		return func(frames [][]byte) {
			p, ok := r.request(frames, "execute_request")
			if !ok {
				return
			}
			h, err := jmsg.Header(p.Header)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.execs = append(r.execs, execRequest{msgID: h.MsgID, idents: cloneFrames(p.Idents),
				header: bytes.Clone(p.Header), sess: h.Session})
			if len(r.execs) == 1 && r.hooks.Activity != nil {
				r.hooks.Activity(true)
			}
			r.mu.Unlock()
			r.warnCell(p, h)
		}
	}
	return nil
}

// warnCell shows the warning for the next cell (WarnNextCell) on the
// stderr of p, a verified execute_request, when it is a user's cell.
func (r *Relay) warnCell(p jmsg.Parts, h jmsg.MsgHeader) {
	r.mu.Lock()
	warning, id := r.warning, r.warnID
	if warning != "" && userCell(p.Content) {
		r.warning = ""
	} else {
		warning = ""
	}
	r.mu.Unlock()
	if warning != "" {
		topic := [][]byte{[]byte("kernel." + id + ".stream")}
		if err := r.send(jmsg.IOPub, topic, "stream", p.Header, h.Session,
			map[string]any{"name": "stderr", "text": warning}); err != nil {
			r.log.Debug("cannot warn the cell", "err", err)
		}
	}
}

// fromKernel wraps the hook of a kernel → client pump so that the first
// message marks the kernel ready.
func (r *Relay) fromKernel(g *generation, inspect func([][]byte)) func([][]byte) {
	return func(frames [][]byte) {
		g.readyOnce.Do(func() { close(g.ready) })
		if inspect != nil {
			inspect(frames)
		}
	}
}

// Ready is closed when the kernel attached now has sent its first message:
// by then ipykernel has installed its signal handlers. Nil (never ready)
// with no kernel attached.
func (r *Relay) Ready() <-chan struct{} {
	if g := r.gen.Load(); g != nil {
		return g.ready
	}
	return nil
}

// IsReady reports whether the kernel attached now has sent anything yet.
func (r *Relay) IsReady() bool {
	select {
	case <-r.Ready():
		return true
	default:
		return false
	}
}

// inspectOut returns the hook for kernel → client messages of ch.
func (r *Relay) inspectOut(ch jmsg.Channel) func([][]byte) {
	if ch != jmsg.Shell {
		return nil
	}
	return func(frames [][]byte) {
		p, ok := r.verified(frames, "execute_reply")
		if !ok {
			r.keepKernelInfo(frames)
			return
		}
		ph, err := jmsg.Header(p.Parent)
		if err != nil {
			return
		}
		r.mu.Lock()
		r.forgetExecLocked(ph.MsgID)
		r.mu.Unlock()
	}
}

// forgetExecLocked drops the execute_request msgID from those running,
// and tells Activity when none is left. Called with r.mu held.
func (r *Relay) forgetExecLocked(msgID string) {
	for i, e := range r.execs {
		if e.msgID == msgID {
			r.execs = append(r.execs[:i], r.execs[i+1:]...)
			if len(r.execs) == 0 && r.hooks.Activity != nil {
				r.hooks.Activity(false)
			}
			return
		}
	}
}

// sentOut returns the hook for kernel → client messages of ch once they
// are queued for the client: the shutdown_reply event comes only then, so
// that the supervisor's drain counts the reply.
func (r *Relay) sentOut(ch jmsg.Channel) func([][]byte) {
	if ch != jmsg.Control {
		return nil
	}
	return func(frames [][]byte) {
		if _, ok := r.verified(frames, "shutdown_reply"); ok {
			r.events <- Event{Kind: ShutdownReply, Frames: frames}
		}
	}
}

// verified returns the parts of a message of type want whose signature
// verifies. A substring test first keeps the common case (any other message)
// to one bytes.Contains.
func (r *Relay) verified(frames [][]byte, want string) (jmsg.Parts, bool) {
	p, err := jmsg.Split(frames)
	if err != nil || !bytes.Contains(p.Header, []byte(want)) {
		return p, false
	}
	if t, err := jmsg.MsgType(p.Header); err != nil || t != want {
		return p, false
	}
	if !r.signer.Verify(p) {
		// Anyone who can reach the ports can send these by the thousand.
		r.warnPeer("ignoring messages with a bad signature", "msg_type", want)
		return p, false
	}
	return p, true
}

// request is verified for a client's request the supervisor acts on, which
// it acts on once: a replayed copy (a signature seen before) is relayed
// untouched, as any message is, and ignored here.
func (r *Relay) request(frames [][]byte, want string) (jmsg.Parts, bool) {
	p, ok := r.verified(frames, want)
	if !ok || len(p.Signature) == 0 { // no key: nothing is signed, nothing to tell apart
		return p, ok
	}
	if !r.history.first(p.Signature) {
		r.warnPeer("ignoring replayed messages (a signature seen before)", "msg_type", want)
		return p, false
	}
	return p, true
}

// userCell reports whether an execute_request's content is a cell a user
// ran: code that is not blank and not silent (frontends run silent code of
// their own, and clients probe with empty cells).
func userCell(content []byte) bool {
	var c struct {
		Code   string `json:"code"`
		Silent bool   `json:"silent"`
	}
	return json.Unmarshal(content, &c) == nil && !c.Silent && strings.TrimSpace(c.Code) != ""
}

// WarnNextCell has text shown on stderr of the next cell the user runs
// (see userCell); id is the kernel id, for the message's topic. Texts
// given before that cell runs are all shown, in order, each on lines of
// its own (a death notice, a previous tree's memory still held, the GPU
// limit's 90 % warning).
func (r *Relay) WarnNextCell(id, text string) {
	r.mu.Lock()
	if r.warning != "" && !strings.HasSuffix(r.warning, "\n") {
		r.warning += "\n"
	}
	r.warning, r.warnID = r.warning+text, id
	r.mu.Unlock()
}

// running returns the oldest unanswered execute_request: the cell the kernel
// was running (ipykernel runs shell requests one at a time, in order).
func (r *Relay) running() (execRequest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.execs) == 0 {
		return execRequest{}, false
	}
	return r.execs[0], true
}

// send emits a message of the supervisor's own, signed with the session key.
func (r *Relay) send(ch jmsg.Channel, idents [][]byte, msgType string, parent []byte, session string, content any) error {
	frames, err := jmsg.NewMessage(r.signer, idents, msgType, parent, session, content)
	if err != nil {
		return fmt.Errorf("build %s: %w", msgType, err)
	}
	return r.outer.doors[ch].Send(frames)
}

// CloseInner stops talking to the kernel; the outer sockets stay bound so
// the supervisor can still answer clients.
func (r *Relay) CloseInner() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	_ = r.Detach()
	r.cancel()
}

func cloneFrames(f [][]byte) [][]byte {
	out := make([][]byte, len(f))
	for i := range f {
		out[i] = bytes.Clone(f[i])
	}
	return out
}

// zmqLogger routes zmq4's own log lines (failed handshakes) to debug level.
func zmqLogger(lg *slog.Logger) *log.Logger {
	return slog.NewLogLogger(lg.Handler(), slog.LevelDebug)
}
