package wrapper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
	"golang.org/x/sys/unix"
)

// The relay's sockets use transports of our own, registered with zmq4 under
// these names, instead of zmq4's plain "tcp" and "ipc". They differ in what
// happens under each accepted or dialed connection (see peerConn):
//
//   - writes never block the caller. zmq4 fans PUB messages out from one
//     goroutine and holds a lock while a ROUTER writes, so one peer that stops
//     reading would otherwise freeze iopub (or a ROUTER) for every client
//     (DESIGN §4, measured with zmq4 v0.17.0). Like libzmq at its high-water
//     mark, a peer whose queue is full has whole messages dropped;
//   - a complete message goes out in one write(2), and writes that pile up
//     while the peer is slow are coalesced, instead of one write per frame
//     header and body;
//   - reads go through a 64 KiB buffer instead of two read(2) calls per frame.
const (
	schemeTCP = "tfgpu-tcp"
	schemeIPC = "tfgpu-ipc"
)

// A peer's queue (bytes accepted for it and not yet taken by its socket)
// is bounded in two steps. Past queueLimit, an iopub subscriber that is
// still taking bytes holds up the PUB writer (peerConn.holdUp) and with it
// the relay's iopub pump (peerGroup.waitRoom): the kernel waits for a slow
// client instead of the client losing output, as with ipykernel's own
// iopub, which queues without bound. A peer that has taken nothing for
// stallAfter has stopped reading (SIGSTOPped, hung) and has whole messages
// dropped instead, so it holds the others up for stallAfter at most. ROUTER
// peers (shell, control, stdin, hb) are never waited for: zmq4 writes to
// all of a ROUTER's peers under one lock. Past queueHardLimit, messages are
// dropped whatever the peer does. A message that starts under the limit is always queued whole, so
// one 50 MB comm buffer still goes through.
var (
	queueLimit     = 8 << 20
	queueHardLimit = 64 << 20
	stallAfter     = 500 * time.Millisecond
)

// flushChunk is the most the flusher writes at once, so that progress of a
// slow peer is seen at least every chunk.
const flushChunk = 256 << 10

// bufferKeep is the largest write buffer kept for reuse after a flush; larger
// ones (a burst, a big buffer) are left to the garbage collector so an idle
// supervisor gives the memory back.
const bufferKeep = 1 << 20

var registerOnce sync.Once

func registerTransports() {
	registerOnce.Do(func() {
		must(zmq4.RegisterTransport(schemeTCP, peerTransport{network: "tcp"}))
		must(zmq4.RegisterTransport(schemeIPC, peerTransport{network: "unix"}))
	})
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// zmqEndpoint turns a Jupyter endpoint ("tcp://127.0.0.1:5555",
// "ipc://path-1") into one served by our transports.
func zmqEndpoint(ep string) string {
	switch {
	case len(ep) > 6 && ep[:6] == "tcp://":
		return schemeTCP + "://" + ep[6:]
	case len(ep) > 6 && ep[:6] == "ipc://":
		return schemeIPC + "://" + ep[6:]
	}
	return ep
}

type peerTransport struct{ network string }

func (t peerTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, t.network, addr)
	if err != nil {
		return nil, err
	}
	return newPeerConn(c), nil
}

func (t peerTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	if t.network == "unix" {
		// libzmq unlinks a stale socket file before binding; a kernel that was
		// SIGKILLed leaves one behind. Only a socket is removed, never a file.
		if fi, err := os.Lstat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(addr)
		}
	}
	l, err := net.Listen(t.network, addr)
	if err != nil {
		return nil, err
	}
	return peerListener{l, groupFor(l.Addr().String())}, nil
}

func (t peerTransport) Addr(ep string) (string, error) {
	if t.network == "unix" {
		return ep, nil
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return "", err
	}
	if host == "*" || host == "" {
		host = "0.0.0.0"
	}
	if port == "*" {
		port = "0"
	}
	return net.JoinHostPort(host, port), nil
}

type peerListener struct {
	net.Listener
	group *peerGroup
}

func (l peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	pc := newPeerConn(c)
	pc.group = l.group
	l.group.add(pc)
	return pc, nil
}

func (l peerListener) Close() error {
	groups.Delete(l.Addr().String())
	return l.Listener.Close()
}

// peerGroup is the set of connections accepted on one listening socket.
type peerGroup struct {
	mu    sync.Mutex
	conns map[*peerConn]struct{}

	// hold: writers to these connections wait for a lagging reader
	// instead of dropping (the iopub PUB socket; see queueLimit).
	hold atomic.Bool
	held atomic.Int32 // writers waiting now
}

// groups maps a listening socket's address to its peerGroup.
var groups sync.Map

func groupFor(addr string) *peerGroup {
	g, _ := groups.LoadOrStore(addr, &peerGroup{conns: map[*peerConn]struct{}{}})
	return g.(*peerGroup)
}

func (g *peerGroup) add(c *peerConn) {
	g.mu.Lock()
	g.conns[c] = struct{}{}
	g.mu.Unlock()
}

func (g *peerGroup) remove(c *peerConn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// waitRoom blocks while a writer to one of g's connections is held up (see
// holdUp), or until ctx ends: the pump then stops reading the kernel, so
// the kernel waits for a slow client and nothing piles up in between. It
// polls every millisecond, only while some client lags.
func (g *peerGroup) waitRoom(ctx context.Context) {
	for g.held.Load() > 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

// errSlowPeer is never returned by Write (messages are dropped, like libzmq);
// it closes the connection when the flusher fails.
var errClosed = errors.New("tfgpu-kernel: connection closed")

// peerConn is one ZMTP connection to a peer. Reads are buffered. Writes are
// parsed just enough (framer) to know where messages start and end: whole
// messages are appended to out, and at each message end out is written with
// one non-blocking write(2); what the kernel does not take is written by the
// flusher goroutine, while later messages keep queueing behind it.
type peerConn struct {
	net.Conn
	raw syscall.RawConn // nil when the conn has no fd (tests with net.Pipe)
	rd  *bufio.Reader

	rf    framer // follows what zmq4 reads, to answer PINGs (see Read)
	cmd   []byte // the command being read, if small
	isGrt bool   // the control message being read is the greeting

	mu       sync.Mutex
	fr       framer
	pongs    [][]byte // PONG frames waiting for a message boundary
	out      []byte   // accepted, not yet written
	spare    []byte
	flushing bool      // the flusher goroutine owns the write side
	inflight int       // bytes the flusher holds and has not written yet
	progress time.Time // when the peer last took bytes
	dropping bool      // dropping the rest of the current message
	closed   bool
	err      error
	wake     chan struct{}
	group    *peerGroup    // the listening socket's connections; nil when dialed
	done     chan struct{} // closed when the flusher has written everything it will

	dropped atomic.Uint64 // messages dropped because the peer's queue was full
}

func newPeerConn(c net.Conn) *peerConn {
	pc := &peerConn{
		Conn:     c,
		rd:       bufio.NewReaderSize(c, 64<<10),
		fr:       framer{greeting: zmtpGreetingLen},
		rf:       framer{greeting: zmtpGreetingLen},
		progress: time.Now(),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			pc.raw = raw
		}
	}
	live.Store(pc, struct{}{})
	go pc.flusher()
	return pc
}

// live holds every open peerConn, for drainConns.
var live sync.Map

// dialRetry is how long an inner socket waits between tries to reach the
// kernel while it starts.
const dialRetry = 20 * time.Millisecond

// drainSettle is how long drainConns waits at least. zmq4's PUB socket
// queues a message and a goroutine of its own hands it to the connections
// later, so a message just published may not have reached any connection
// yet when the first check finds them all idle: under load a cell's death
// notice on iopub was lost that way while its execute_reply (ROUTER,
// handed over at once) arrived.
const drainSettle = 50 * time.Millisecond

// drainConns waits, at least drainSettle and at most max, until every
// connection has written what was queued on it: the last replies before
// the supervisor exits.
func drainConns(max time.Duration) {
	start := time.Now()
	deadline := start.Add(max)
	for time.Now().Before(deadline) {
		if time.Since(start) < drainSettle {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		busy := false
		live.Range(func(k, _ any) bool {
			busy = k.(*peerConn).pending()
			return !busy
		})
		if !busy {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Read reads through the buffer. It also follows the frames read, because
// zmq4 v0.17.0 hands a peer's ZMTP PING (libzmq's ZMQ_HEARTBEAT_IVL) to the
// socket as a message and never answers it, so libzmq peers with heartbeats
// disconnect every timeout. The PONG (RFC 37/ZMTP §"Connection heartbeating")
// is sent from here. Only one goroutine reads a conn, so no lock is needed.
func (c *peerConn) Read(p []byte) (int, error) {
	n, err := c.rd.Read(p)
	for b := p[:n]; len(b) > 0; {
		grt := c.rf.greeting > 0
		k, start, end, control := c.rf.step(b)
		if start {
			c.cmd, c.isGrt = c.cmd[:0], grt
		}
		if control && !c.isGrt && len(c.cmd)+k <= 300 {
			c.cmd = append(c.cmd, b[:k]...)
		}
		if end && control && !c.isGrt {
			c.answerPing(c.cmd)
		}
		b = b[k:]
	}
	return n, err
}

// answerPing queues a PONG if raw (a whole short command frame) is a PING.
func (c *peerConn) answerPing(raw []byte) {
	const ping = "\x04PING"
	if len(raw) < 2+len(ping)+2 || raw[0]&flagLong != 0 || string(raw[2:2+len(ping)]) != ping {
		return
	}
	context := raw[2+len(ping)+2:] // after the 2-byte TTL
	pong := append([]byte{flagCommand, byte(5 + len(context)), 4, 'P', 'O', 'N', 'G'}, context...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.fr.inMsg { // zmq4 is writing a message: wait for its end
		c.pongs = append(c.pongs, pong)
		return
	}
	c.out = append(c.out, pong...)
	if !c.flushing {
		c.writeNow()
	}
}

// Write takes p into the queue and returns at once; see peerConn.
func (c *peerConn) Write(p []byte) (int, error) {
	n := len(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		if c.err != nil {
			return 0, c.err
		}
		return 0, &net.OpError{Op: "write", Net: "zmtp", Err: errClosed}
	}
	if c.group != nil && c.group.hold.Load() && !c.fr.inMsg {
		c.holdUp()
		if c.closed {
			return 0, &net.OpError{Op: "write", Net: "zmtp", Err: errClosed}
		}
	}
	ended := false
	for len(p) > 0 {
		k, start, end, control := c.fr.step(p)
		if start {
			c.dropping = !control && c.full()
			if c.dropping {
				c.dropped.Add(1)
			}
		}
		if !c.dropping {
			c.out = append(c.out, p[:k]...)
		}
		if end {
			c.dropping = false
			ended = true
			for _, pong := range c.pongs {
				c.out = append(c.out, pong...)
			}
			c.pongs = c.pongs[:0]
		}
		p = p[k:]
	}
	if ended && !c.flushing && len(c.out) > 0 {
		c.writeNow()
	}
	return n, nil
}

// full reports whether the next message to the peer is to be dropped.
// Called with mu held.
func (c *peerConn) full() bool {
	n := len(c.out) + c.inflight
	return n >= queueHardLimit || (n >= queueLimit && time.Since(c.progress) > stallAfter)
}

// lagging reports whether the peer's queue is full while it still reads:
// then the sender should wait (see queueLimit). Called with mu held.
func (c *peerConn) lagging() bool {
	return !c.closed && len(c.out)+c.inflight >= queueLimit && time.Since(c.progress) <= stallAfter
}

// holdUp waits, before a new message, while the peer lags but reads; a
// peer that stops reading meanwhile is given up on after stallAfter (its
// messages are then dropped). Called with mu held; releases it to wait.
func (c *peerConn) holdUp() {
	if !c.lagging() {
		return
	}
	c.group.held.Add(1)
	defer c.group.held.Add(-1)
	for c.lagging() {
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
		c.mu.Lock()
	}
}

// writeNow tries one non-blocking write of out and hands what is left to the
// flusher. Called with mu held; never blocks.
func (c *peerConn) writeNow() {
	if c.raw != nil {
		var n int
		var werr error
		err := c.raw.Write(func(fd uintptr) bool {
			n, werr = unix.Write(int(fd), c.out)
			return true // one attempt; never wait for the peer here
		})
		if n > 0 {
			c.progress = time.Now()
		}
		if err == nil && werr == nil && n == len(c.out) {
			c.out = c.out[:0]
			return
		}
		if err == nil && (werr == nil || werr == unix.EAGAIN) && n > 0 {
			c.out = append(c.out[:0], c.out[n:]...)
		}
		// Any other error is left for the flusher's blocking write to report.
	}
	c.flushing = true
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// flusher writes, blocking, whatever writeNow could not, until the conn is
// closed. It takes out whole, so a slow peer gets large coalesced writes.
func (c *peerConn) flusher() {
	defer close(c.done)
	for range c.wake {
		c.mu.Lock()
		for len(c.out) > 0 && !c.closed {
			buf := c.out
			c.out = c.spare[:0]
			c.inflight = len(buf)
			c.mu.Unlock()
			var err error
			for off := 0; off < len(buf) && err == nil; {
				end := min(off+flushChunk, len(buf))
				_, err = c.Conn.Write(buf[off:end])
				off = end
				c.mu.Lock()
				c.inflight, c.progress = len(buf)-off, time.Now()
				c.mu.Unlock()
			}
			c.mu.Lock()
			c.inflight = 0
			if cap(buf) <= bufferKeep {
				c.spare = buf[:0]
			} else {
				c.spare = nil
			}
			if err != nil {
				c.err = err
				c.closed = true
				c.out = nil
				c.mu.Unlock()
				c.Conn.Close()
				return
			}
		}
		c.flushing = false
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return
		}
	}
}

// Close closes the connection. Messages still queued are dropped; callers
// that need them delivered (the supervisor's last replies) call Drain first.
func (c *peerConn) Close() error {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	if !already {
		close(c.wake)
	}
	live.Delete(c)
	if c.group != nil {
		c.group.remove(c)
	}
	return c.Conn.Close()
}

// pending reports whether bytes are queued or being written.
func (c *peerConn) pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && (c.flushing || len(c.out) > 0)
}

// String is for logs: never includes data.
func (c *peerConn) String() string {
	return fmt.Sprintf("zmtp %s->%s", c.LocalAddr(), c.RemoteAddr())
}
