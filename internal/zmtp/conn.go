package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// conn is one ZMTP connection: accepted through a Door (door != nil:
// read by inbound, written by the relay's sends) or dialed to the kernel
// under a zmq4 socket (which reads it, and writes its handshake).
//
// Writes never block the sender: one peer that stopped reading must not
// freeze every client, or the kernel's output. Messages are queued whole:
// a door's as frames (putMsg), a dialed conn's as the bytes zmq4 and
// Link.Send write, followed by the framer to find where messages end.
// Small pieces are copied, large frame bodies kept by reference. At each
// message end one non-blocking writev(2) is tried; what the peer does not
// take is written by a flusher goroutine that exists only while there is a
// backlog.
//
// Keeping large pieces by reference is safe because no sender in this
// program touches a message's frames after sending it, and zmq4 passes
// the frames of a Msg through unchanged. On iopub all subscribers then
// share one copy of a large output instead of holding one each.
type conn struct {
	net.Conn
	raw  syscall.RawConn // nil when the conn has no fd (tests with net.Pipe)
	rd   *bufio.Reader
	in   *inbound     // accepted conns only
	seal *curveServer // CURVE (accepted conns): each frame is sealed as it is queued
	door *Door        // nil when dialed
	sh   *Shared      // the door's; for dialed conns a private one with defaults
	lim  *Limits

	identity string    // the routing identity Recv gives (ROUTER doors; see Door.claim)
	claimed  string    // the identity the client claimed, when it is not random
	link     *Link     // dialed through a Link: told when established, and closed
	peer     peer      // accepted: who is at the other end
	since    time.Time // accepted: when its handshake ended
	acct     *recvAcct // accepted: its part of the receive budget
	mayHold  bool      // iopub: a lagging reader holds the writer up (see Door.WaitRoom)

	mu        sync.Mutex
	cond      *sync.Cond // progress, close: wakes holdUp
	fw        framer     // follows what zmq4 writes
	queue     [][]byte   // accepted, not yet written
	owned     bool       // the last segment of queue is a buffer of ours (appendable)
	spare     []byte     // a buffer of ours, written out, for the next small pieces
	queued    int64      // bytes in queue plus bytes the flusher holds
	flushing  bool       // a flusher goroutine runs
	progress  time.Time  // when the peer last took bytes
	dropping  bool       // dropping the rest of the current message
	subs      map[string]int
	everSub   bool // iopub: has subscribed before (Door's replay is for the first time only)
	closed    bool
	gone      chan struct{} // closed with the conn
	err       error
	stalledN  int  // messages dropped in the current stall, for the log (endStall)
	lagSet    bool // counted in the door's heldN (mayHold, queue past QueueLimit)
	holdSpent bool // held the writer for HoldFor or stalled: no hold until caught up

	// established: the handshake is done (a door's, or on a dialed conn
	// zmq4's greeting and READY are written), so messages may follow
	// (sendMsg); handshake counts the control messages zmq4 wrote so far.
	established bool
	handshake   int
	hdr         []byte // sendMsg's frame header scratch

	pings atomic.Int64 // PINGs received

	// writeNow's scratch, so the hot path allocates nothing: the iovecs
	// and the callback handed to RawConn.Write, made once.
	iov     []unix.Iovec
	wbatch  [][]byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// refMin is the smallest piece Write keeps by reference rather than copy.
const refMin = 4 << 10

// iovMax bounds the segments of one writev(2) (IOV_MAX is 1024 on Linux).
const iovMax = 1024

// spareMax is the largest buffer of ours kept for reuse; a larger one (a
// burst of small messages to a slow peer) is left to the collector.
const spareMax = 256 << 10

func newConn(nc net.Conn, rd *bufio.Reader, sh *Shared) *conn {
	c := &conn{Conn: nc, rd: rd, sh: sh, lim: &sh.lim, progress: time.Now()}
	c.cond = sync.NewCond(&c.mu)
	c.gone = make(chan struct{})
	c.writeFn = func(fd uintptr) bool {
		c.wn, c.werr = c.writev(int(fd), c.wbatch)
		return true // one attempt; never wait for the peer here
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
		}
	}
	return c
}

// Read is zmq4's, on a dialed conn: the kernel's bytes, unchecked.
func (c *conn) Read(p []byte) (int, error) { return c.rd.Read(p) }

// Write takes p into the queue and returns at once; see conn.
func (c *conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, c.closedErr()
	}
	ended, err := c.take(p)
	if err != nil {
		return 0, err
	}
	c.kick(ended)
	return len(p), nil
}

// sendMsg queues one whole message, the frames as they are (large ones by
// reference), as zmq4 would write it, and tries to write it out at once:
// the relay's direct path (docs/design.md#relay-and-transport), which
// saves the hand-off to a writer goroutine of zmq4's. Until zmq4 has
// written its own handshake on the conn (see established) the message is
// not taken and errNotEstablished says so: the conn is not yet connected
// as far as its socket is concerned.
func (c *conn) sendMsg(frames [][]byte) error {
	if len(frames) == 0 {
		return errNoFrames
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closedErr()
	}
	if !c.established {
		return errNotEstablished
	}
	if c.door != nil {
		c.putMsg(frames)
		c.kick(true)
		return nil
	}
	// A dialed conn: through the framer, which zmq4's own writes pass too.
	ended := false
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = FlagMore
		}
		c.hdr = AppendFrameHeader(c.hdr[:0], flags, len(f))
		e1, err := c.take(c.hdr)
		if err != nil {
			return err
		}
		e2, err := c.take(f)
		if err != nil {
			return err
		}
		ended = ended || e1 || e2
	}
	c.kick(ended)
	return nil
}

// putMsg queues a whole message for a client: unless its queue is full,
// or on iopub its first frame matches none of its subscriptions. Called
// with mu held.
func (c *conn) putMsg(frames [][]byte) {
	if c.full() || (c.subs != nil && !c.subscribed(frames[0])) {
		return
	}
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = FlagMore
		}
		c.putFrame(flags, f)
	}
	if c.mayHold && !c.lagSet && !c.holdSpent && c.queued >= c.lim.QueueLimit {
		c.lagSet = true
		c.door.hold1(+1)
	}
}

// putFrame queues one frame: its header and body as they are (a large
// body by reference), or on CURVE sealed into a MESSAGE of its own, the
// body copied into it once and encrypted where it lies. Called with mu
// held.
func (c *conn) putFrame(flags byte, body []byte) {
	if c.seal == nil {
		c.hdr = AppendFrameHeader(c.hdr[:0], flags, len(body))
		c.enqueue(c.hdr)
		c.enqueue(body)
		return
	}
	m := append(messageFrame(flags, uint64(len(body))), body...)
	if err := c.seal.sealMessage(m); err != nil {
		c.closeLocked("seal: " + err.Error())
		return
	}
	c.enqueue(m)
}

var (
	errNoFrames       = errors.New("zmtp: a message without frames")
	errNotEstablished = errors.New("zmtp: connection not established yet")
)

// kick tries one write when a message ended and no flusher runs. Called
// with mu held.
func (c *conn) kick(ended bool) {
	if ended && !c.flushing && len(c.queue) > 0 {
		c.writeNow()
	}
}

// take follows p, written to a dialed conn, through the framer and queues
// what is to go out (see conn), and reports whether a message ended in it.
// Called with mu held.
func (c *conn) take(p []byte) (ended bool, err error) {
	for len(p) > 0 {
		s := c.fw.step(p)
		piece := p[:s.n]
		p = p[s.n:]
		if s.control && s.end && !c.established {
			// A dialed conn: zmq4's greeting, then its READY.
			if c.handshake++; c.handshake == 2 {
				c.established = true
				if c.link != nil {
					c.link.up(c)
				}
			}
		}
		if s.start && !s.control {
			if c.closed {
				return ended, c.closedErr()
			}
			c.dropping = c.full()
		}
		if !c.dropping {
			c.enqueue(piece)
		}
		if s.end {
			c.dropping = false
			ended = true
		}
	}
	return ended, nil
}

func (c *conn) closedErr() error {
	if c.err != nil {
		return c.err
	}
	return &net.OpError{Op: "write", Net: "zmtp", Err: net.ErrClosed}
}

// enqueue appends piece: by reference when large, else copied into the
// buffer of ours at the queue's end. Called with mu held.
func (c *conn) enqueue(piece []byte) {
	if len(piece) == 0 {
		return
	}
	c.queued += int64(len(piece))
	if c.door != nil {
		c.sh.queued.Add(int64(len(piece)))
	}
	if len(piece) >= refMin {
		c.queue = append(c.queue, piece)
		c.owned = false
		return
	}
	if last := len(c.queue) - 1; c.owned && cap(c.queue[last])-len(c.queue[last]) >= len(piece) {
		c.queue[last] = append(c.queue[last], piece...)
		return
	}
	buf := c.spare
	c.spare = nil
	if cap(buf) < len(piece) {
		buf = make([]byte, 0, max(2<<10, len(piece)))
	}
	c.queue = append(c.queue, append(buf, piece...))
	c.owned = true
}

// dequeued accounts for n bytes the peer took. Called with mu held.
func (c *conn) dequeued(n int64) {
	c.queued -= n
	if c.door != nil {
		c.sh.unqueued(n)
	}
	if n > 0 {
		c.progress = time.Now()
		c.endStall("it reads again")
		c.cond.Broadcast()
	}
	if c.lagSet && c.queued < c.lim.QueueLimit {
		c.lagSet = false
		c.door.hold1(-1)
	}
	if c.queued == 0 {
		c.holdSpent = false // caught up: it may hold the writer again
	}
}

// spendHold ends the connection's hold on the writer (Door.WaitRoom): it
// misses messages past QueueLimit until it has caught up. Called with mu
// held.
func (c *conn) spendHold() {
	c.lagSet, c.holdSpent = false, true
	c.door.hold1(-1)
	c.sh.rl.warn("zmtp: an iopub client lagged past its hold; it misses messages until it catches up",
		"socket", c.door.name, "peer", c.RemoteAddr().String(), "who", c.peer.key, "queued", c.queued)
}

// endStall says, once a stall is over, how many messages it cost the
// peer: Shared.Dropped counts them for everyone, this line says whose.
// Called with mu held.
func (c *conn) endStall(then string) {
	if c.stalledN == 0 {
		return
	}
	socket := "inner"
	if c.door != nil {
		socket = c.door.name
	}
	c.sh.rl.warn("zmtp: a peer that stopped reading lost messages",
		"socket", socket, "peer", c.RemoteAddr().String(), "dropped", c.stalledN, "then", then)
	c.stalledN = 0
}

// stalled: bytes wait and the peer has taken none for StallAfter.
func (c *conn) stalled() bool {
	return c.queued > 0 && time.Since(c.progress) > c.lim.StallAfter
}

// full reports whether the next message to the peer is to be dropped, and
// disconnects a stalled peer while all queues together are over
// TotalQueue. Called with mu held at a message start.
func (c *conn) full() bool {
	q := c.queued
	stalled := c.stalled()
	if stalled && c.door != nil && c.sh.queued.Load() > c.lim.TotalQueue {
		c.sh.rl.warn("zmtp: disconnected a client that stopped reading while output queues are full",
			"socket", c.door.name, "peer", c.RemoteAddr().String(), "queued", q, "all_queued", c.sh.queued.Load())
		c.closeLocked("stalled while output queues are full")
		return true
	}
	// On iopub a connection that may not hold the writer (another peer's,
	// or one whose hold is spent) misses messages past QueueLimit, as a
	// libzmq PUB's subscriber misses them past its high-water mark.
	holdless := c.door != nil && c.door.hold && (!c.mayHold || c.holdSpent)
	drop := q >= c.lim.HardLimit || (q >= c.lim.QueueLimit && (stalled || holdless))
	if drop {
		if c.stalledN == 0 && c.door != nil {
			why := "it stopped reading"
			switch {
			case stalled:
			case q >= c.lim.HardLimit:
				why = "its queue is full"
			case !c.mayHold:
				why = "it reads slower than the kernel writes, and is not the kernel's owner"
			default:
				why = "it lagged past its hold"
			}
			c.sh.rl.warn("zmtp: dropping messages for a client",
				"socket", c.door.name, "peer", c.RemoteAddr().String(), "who", c.peer.key, "queued", q, "why", why)
		}
		c.stalledN++
		c.sh.dropped.Add(1)
	}
	return drop
}

// subscribed reports whether a message whose first frame is head goes to
// this iopub peer. Called with mu held.
func (c *conn) subscribed(head []byte) bool {
	if len(c.subs) == 0 {
		return false
	}
	if _, all := c.subs[""]; all {
		return true
	}
	for t := range c.subs {
		if bytes.HasPrefix(head, []byte(t)) {
			return true
		}
	}
	return false
}

// subscribe applies a subscription from the peer (inbound's hook).
// Subscriptions are counted like libzmq's: subscribing twice takes two
// cancels.
//
// A connection's first subscription within its door's replay window gets
// what the door published since its bind (Door.Send, ReplayFor), before
// anything published after it: Send waits meanwhile.
func (c *conn) subscribe(topic []byte, on bool) error {
	var replay [][][]byte
	if d := c.door; on && d != nil && d.replaying.Load() {
		d.sendMu.Lock()
		defer d.sendMu.Unlock()
		if time.Now().Before(d.replayUntil) {
			replay = d.replayed
		}
	}
	c.mu.Lock()
	t := string(topic)
	delta := 0 // this connection's first subscription to t, or its last cancel
	switch {
	case c.closed:
	case !on && c.subs[t] > 1:
		c.subs[t]--
	case !on:
		if _, ok := c.subs[t]; ok {
			delete(c.subs, t)
			delta = -1
		}
	default:
		if _, ok := c.subs[t]; !ok && len(c.subs) >= c.lim.MaxSubscriptions {
			c.mu.Unlock()
			return protoErr("more than %d subscriptions", c.lim.MaxSubscriptions)
		}
		c.subs[t]++
		if c.subs[t] == 1 {
			delta = 1
		}
	}
	first := delta > 0 && len(c.subs) == 1
	if c.everSub || delta <= 0 {
		replay = nil // it had what it subscribed to as it came: no copy twice
	}
	c.everSub = c.everSub || delta > 0
	c.mu.Unlock()
	if delta != 0 && c.door != nil {
		c.door.topic(t, delta) // the door's lock is never taken under ours
	}
	if first {
		for _, m := range replay { // nil but for the first subscription ever
			_ = c.sendMsg(m) // what this subscription matches (putMsg)
		}
	}
	return nil
}

// pingReceived answers a peer's PING, unless the peer is not reading what
// is queued for it already (then it would only pile up).
func (c *conn) pingReceived(context []byte) {
	c.pings.Add(1)
	pong := AppendCommand(nil, "PONG", context)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.queued > c.lim.PongQueue {
		return
	}
	// Messages are queued whole (putMsg): this is between two.
	h, _ := ParseFrameHeader(pong)
	c.putFrame(FlagCommand, pong[h.Len:])
	if !c.flushing {
		c.writeNow()
	}
}

// writeNow tries one non-blocking writev of the queue and starts the
// flusher for what is left. Called with mu held; never blocks.
func (c *conn) writeNow() {
	if c.raw != nil {
		c.wbatch, c.wn, c.werr = c.queue[:min(len(c.queue), iovMax)], 0, nil
		err := c.raw.Write(c.writeFn)
		c.wbatch = nil
		if c.wn > 0 {
			c.consume(c.wn)
		}
		if err == nil && c.werr == nil && len(c.queue) == 0 {
			return
		}
		// Any error but EAGAIN is left for the flusher to report.
	}
	c.flushing = true
	go c.flusher()
}

// consume drops n written bytes from the front of the queue. Called with
// mu held. An emptied queue keeps its arrays: the next message reuses them.
func (c *conn) consume(n int) {
	c.dequeued(int64(n))
	i := 0
	for ; n > 0 && i < len(c.queue); i++ {
		if n < len(c.queue[i]) {
			c.queue[i] = c.queue[i][n:]
			break
		}
		n -= len(c.queue[i])
	}
	if i == len(c.queue) {
		if c.owned && i > 0 && cap(c.queue[i-1]) <= spareMax {
			c.spare = c.queue[i-1][:0] // written out: ours to reuse
		}
		clear(c.queue)
		c.queue, c.owned = c.queue[:0], false
		return
	}
	clear(c.queue[:i])
	c.queue = append(c.queue[:0], c.queue[i:]...)
}

// flusher writes the backlog, blocking, until it is gone or the conn
// closes. Segments are written from a snapshot of the queue, so Write can
// keep appending meanwhile.
func (c *conn) flusher() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var batch [][]byte
	var iov []unix.Iovec
	for len(c.queue) > 0 && !c.closed {
		// A copy of the segment headers: Write may extend the last one
		// (an owned buffer) while the batch is written.
		batch = append(batch[:0], c.queue[:min(len(c.queue), iovMax)]...)
		c.mu.Unlock()
		n, err := c.blockingWritev(batch, &iov)
		c.mu.Lock()
		if c.closed {
			break
		}
		c.consume(n)
		if err != nil {
			c.err = err
			c.closeLocked("write: " + err.Error())
			break
		}
	}
	c.flushing = false
}

// blockingWritev writes some of batch, waiting for the peer if need be,
// and returns how much went out. Only the flusher calls it, outside mu,
// so it has iovecs of its own.
func (c *conn) blockingWritev(batch [][]byte, iov *[]unix.Iovec) (int, error) {
	if c.raw == nil {
		return c.Conn.Write(batch[0])
	}
	var n int
	var werr error
	err := c.raw.Write(func(fd uintptr) bool {
		n, werr = writevInto(iov, int(fd), batch)
		return werr != unix.EAGAIN
	})
	if err == nil {
		err = werr
	}
	return n, err
}

// writev is writevInto with the conn's iovecs (mu held).
func (c *conn) writev(fd int, bufs [][]byte) (int, error) { return writevInto(&c.iov, fd, bufs) }

// writevInto is writev(2) of bufs through the iovec array *iov, grown as
// needed and kept for the next call (x/sys/unix.Writev allocates one per
// call). It returns the bytes written, 0 on an error.
func writevInto(iov *[]unix.Iovec, fd int, bufs [][]byte) (int, error) {
	v := (*iov)[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		var e unix.Iovec
		e.Base = &b[0]
		e.SetLen(len(b))
		v = append(v, e)
	}
	*iov = v
	if len(v) == 0 {
		return 0, nil
	}
	for {
		// Raw: the socket is non-blocking, so the call never blocks, and
		// need not tell the runtime it might (see rawReader).
		r, _, errno := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			clear(v) // no pointers into message buffers left behind
			return 0, errno
		}
		clear(v)
		return int(r), nil
	}
}

// rawReader reads a socket with read(2) as a raw system call. The socket
// is non-blocking (Go's poller waits for it to be readable), so the call
// never blocks and need not tell the runtime that it might: telling it
// (syscall.Read does) wakes the runtime's monitor thread on every read,
// and on a relay that reads a message at a time those wake-ups and the
// monitor's own short sleeps after each were most of the supervisor's CPU
// (docs/benchmarks.md#relay-cpu).
type rawReader struct {
	nc   net.Conn
	rc   syscall.RawConn // nil: read nc as it is
	p    []byte
	n    int
	err  error
	fn   func(fd uintptr) bool
	prog *progress // sets the read deadline of an unfinished message; nil: none
}

func newRawReader(nc net.Conn) *rawReader {
	r := &rawReader{nc: nc}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			r.rc = rc
		}
	}
	r.fn = func(fd uintptr) bool {
		for {
			n, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
			switch errno {
			case 0:
				r.n, r.err = int(n), nil
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait until readable
			default:
				r.n, r.err = 0, errno
			}
			return true
		}
	}
	return r
}

// Read is io.Reader's: at least one byte, or an error (io.EOF when the
// peer closed).
func (r *rawReader) Read(p []byte) (int, error) {
	if r.prog != nil {
		r.prog.beforeRead()
	}
	if r.rc == nil {
		return r.nc.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	r.p = p
	err := r.rc.Read(r.fn)
	r.p = nil
	switch {
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: r.nc.LocalAddr().Network(), Addr: r.nc.RemoteAddr(), Err: err}
	case r.err != nil:
		return 0, &net.OpError{Op: "read", Net: r.nc.LocalAddr().Network(), Addr: r.nc.RemoteAddr(), Err: r.err}
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}

// Close closes the connection and lets go of everything it held. Messages
// still queued are dropped; see Drain for the last replies.
func (c *conn) Close() error {
	c.closeWith("")
	return nil
}

func (c *conn) closeWith(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked(why)
}

func (c *conn) closeLocked(why string) {
	if c.closed {
		return
	}
	c.closed = true
	close(c.gone)
	c.endStall("disconnected")
	if c.door != nil && why != "" && c.sh.log.Enabled(context.Background(), slog.LevelDebug) {
		c.sh.log.Debug("zmtp: connection closed", "socket", c.door.name, "peer", c.RemoteAddr().String(), "why", why)
	}
	c.dequeued(c.queued)
	if c.lagSet {
		c.lagSet = false
		c.door.hold1(-1)
	}
	if c.acct != nil {
		c.sh.unregister(c.acct)
	}
	subs := c.subs
	c.queue, c.subs = nil, nil
	c.cond.Broadcast()
	_ = c.Conn.Close() // the reader's next Read fails and gives back its receive budget
	if c.door != nil {
		go c.door.forget(c, subs) // takes the door's lock; never under ours
	}
	if c.link != nil {
		c.link.down(c)
	}
}

// String is for logs: never includes data.
func (c *conn) String() string {
	return fmt.Sprintf("zmtp %s->%s", c.LocalAddr(), c.RemoteAddr())
}
