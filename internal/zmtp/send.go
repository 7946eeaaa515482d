package zmtp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// The relay sends through the connections it owns, to the kernel too,
// not through zmq4 sockets (docs/design.md#relay-and-transport): zmq4's ROUTER and
// DEALER start a goroutine per message sent (an errgroup) and its PUB hands
// each message to a goroutine of its own through a queue, so a message
// crossed one more goroutine than it needs, and a message just published
// might not have reached any connection when the supervisor drained its
// queues before exiting. Here a send queues the message on the
// connection(s) before it returns, and writes it at once when the peer
// takes it. On a Link, zmq4 still does the handshake and the reading.

// Send sends one message to the door's clients. On a ROUTER door the first
// frame is the routing identity: the message goes to that client, or
// nowhere when no connection holds it (as zmq4's ROUTER and libzmq's do).
// On a PUB door it goes to every connection whose subscriptions match its
// first frame; a subscriber that lags holds the sender up (see
// [Door.WaitRoom]) or misses it (see [Limits]), as zmq4's writes do.
// Sends are serialised per door, so every client sees the same order.
//
// A routing identity is one connection's (see [Door.claim]): a reply goes
// to the connection its request came from. On a door set to
// [Door.RouteToAnySlot] (stdin: the kernel asks for input with the
// identity of the shell connection that ran the cell), a message for a
// slot this door does not have goes to the lowest slot of the same
// identity, which the same peer holds.
func (d *Door) Send(frames [][]byte) error { return d.send(frames, true) }

// SendLive is Send, on a PUB door for the subscribers of now only: the
// message is not kept for a later subscription (ReplayFor). An
// iopub_welcome answers the subscriptions in place when it is sent.
func (d *Door) SendLive(frames [][]byte) error { return d.send(frames, false) }

func (d *Door) send(frames [][]byte, keep bool) error {
	if len(frames) == 0 {
		return errNoFrames
	}
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	if d.socketType == "ROUTER" {
		d.mu.Lock()
		c := d.ids[string(frames[0])]
		if c == nil && d.anySlot {
			c = d.lowestSlotLocked(claimedOf(string(frames[0])))
		}
		d.mu.Unlock()
		if c == nil || len(frames) < 2 {
			return nil // no such peer: dropped, as a ROUTER does
		}
		if err := c.sendMsg(frames[1:]); err != nil && !errors.Is(err, errNotEstablished) {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		return nil
	}
	if keep {
		d.keepForReplay(frames)
	}
	d.mu.Lock()
	d.fan = d.fan[:0]
	for c := range d.conns {
		d.fan = append(d.fan, c)
	}
	d.mu.Unlock()
	for _, c := range d.fan {
		_ = c.sendMsg(frames) // a closed subscriber misses it, as on any PUB; a new one gets it replayed
	}
	clear(d.fan)
	return nil
}

// ReplayFor is how long after its bind a PUB door keeps what it published
// for the first subscription of each connection (at most QueueLimit bytes
// of it).
//
// A client kept across a restart (a jupyter_client KernelClient, the
// sockets jupyter_server keeps behind a websocket) reconnects each socket
// about 100 ms after the old supervisor closed it, each on its own: a
// spare kernel may answer the request its DEALER queued meanwhile before
// its SUB is back, and a PUB drops what no one subscribes to. So what the
// door published since its bind reaches a connection that subscribes
// within ReplayFor, before anything published later (docs/design.md#a-returning-client).
// Nothing is replayed that the connection could not have subscribed to
// at the bind; with CURVE only a key holder connects.
const ReplayFor = 2 * time.Second

// keepForReplay keeps frames for later first subscriptions, while the
// window is open and the bytes last; past the window it lets go of them.
// Called with sendMu held.
func (d *Door) keepForReplay(frames [][]byte) {
	if d.replayUntil.IsZero() {
		return
	}
	if !time.Now().Before(d.replayUntil) {
		d.replaying.Store(false)
		d.replayUntil, d.replayed, d.replayBytes = time.Time{}, nil, 0
		return
	}
	var n int64
	for _, f := range frames {
		n += int64(len(f))
	}
	if d.replayBytes+n > d.sh.lim.QueueLimit {
		return
	}
	d.replayBytes += n
	d.replayed = append(d.replayed, frames)
}

// A Link is the relay's side of one dialed socket (to the kernel): the
// connection zmq4 dialed through [Link.Endpoint], once zmq4 has done its
// handshake on it, for [Link.Send].
type Link struct {
	ctx   context.Context
	name  string
	mu    sync.Mutex
	cond  *sync.Cond
	conn  *conn // established, not closed; nil before and between
	ended bool
}

// NewLink returns a link for one dialed socket; name is for errors. Sends
// wait for the connection until ctx ends.
func NewLink(ctx context.Context, name string) *Link {
	l := &Link{ctx: ctx, name: name}
	l.cond = sync.NewCond(&l.mu)
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.ended = true
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	return l
}

var linkSeq atomic.Int64

// Endpoint returns the zmq4 endpoint through which a zmq4 socket dials the
// Jupyter endpoint ep ("tcp://127.0.0.1:5555", "ipc://path-1") for l.
func (l *Link) Endpoint(ep string) (string, error) {
	scheme, addr, ok := cutScheme(ep)
	if !ok || (scheme != "tcp" && scheme != "ipc") {
		return "", fmt.Errorf("unsupported endpoint %q", ep)
	}
	reg := fmt.Sprintf("tfgpu-link%d-%s", linkSeq.Add(1), scheme)
	if err := zmq4.RegisterTransport(reg, dialTransport{network: netOf(scheme), link: l}); err != nil {
		return "", err
	}
	return reg + "://" + addr, nil
}

// up makes c the link's connection: zmq4 has written its handshake on it.
func (l *Link) up(c *conn) {
	l.mu.Lock()
	l.conn = c
	l.cond.Broadcast()
	l.mu.Unlock()
}

// down forgets c when it closes.
func (l *Link) down(c *conn) {
	l.mu.Lock()
	if l.conn == c {
		l.conn = nil
	}
	l.mu.Unlock()
}

// Send sends one message to the peer, waiting until the connection is
// established (the kernel binds its sockets a second or so after it
// starts) or the link's context ends, as zmq4's DEALER waits for its first
// connection.
func (l *Link) Send(frames [][]byte) error {
	l.mu.Lock()
	for l.conn == nil && !l.ended {
		l.cond.Wait()
	}
	c := l.conn
	l.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%s: %w", l.name, l.ctx.Err())
	}
	if err := c.sendMsg(frames); err != nil {
		return fmt.Errorf("%s: %w", l.name, err)
	}
	return nil
}

// Drain waits, at most max, until every connection of doors has written
// what was queued on it: the last replies before the supervisor exits.
// Every send queues before it returns (Door.Send), so what was sent before
// Drain is counted; Drain wakes when the peers have taken it, without
// polling. It reports whether everything was written.
func Drain(max time.Duration, doors ...*Door) bool {
	t := time.NewTimer(max)
	defer t.Stop()
	seen := map[*Shared]bool{}
	for _, d := range doors {
		if d == nil || seen[d.sh] {
			continue
		}
		seen[d.sh] = true
		if !d.sh.waitWritten(t.C) {
			return false
		}
	}
	return true
}

// waitWritten waits until no byte is queued for any peer of s, or until
// timeout fires (false).
func (s *Shared) waitWritten(timeout <-chan time.Time) bool {
	for {
		s.idleMu.Lock()
		if s.queued.Load() == 0 {
			s.idleMu.Unlock()
			return true
		}
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		ch := s.idle
		s.idleMu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			return false
		}
	}
}

// unqueued accounts n bytes no longer queued for a peer, and wakes Drain
// when none are left.
func (s *Shared) unqueued(n int64) {
	if s.queued.Add(-n) != 0 {
		return
	}
	s.idleMu.Lock()
	if s.idle != nil && s.queued.Load() == 0 {
		close(s.idle)
		s.idle = nil
	}
	s.idleMu.Unlock()
}

// RouteToAnySlot makes Send deliver a message for a missing slot of an
// identity to another of its slots (see Send). Call it before clients
// connect.
func (d *Door) RouteToAnySlot() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.anySlot = true
}

// lowestSlotLocked is the connection of the lowest slot of identity id,
// nil when none holds it. Called with d.mu held.
func (d *Door) lowestSlotLocked(id string) *conn {
	if id == "" || d.holders[id].n == 0 {
		return nil
	}
	for k := range maxSlots {
		if c := d.ids[slotID(id, k)]; c != nil {
			return c
		}
	}
	return nil
}
