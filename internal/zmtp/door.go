package zmtp

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// A Door is the listening side of one of the sockets Jupyter's clients
// connect to. It is a zmq4 transport (registered under a name of its own,
// see Bind) whose listener hands zmq4 only connections that have completed
// the ZMTP handshake with it, each checked on a goroutine of its own under
// a deadline, and whose reads it guards from then on (see inbound).
//
// zmq4 v0.17.0 would otherwise do the handshake inside its one accept loop
// (a peer that sends nothing blocks every later client), parse a peer's
// READY with unchecked lengths (a panic), allocate whatever size a frame
// header declares (a panic), spin on accept errors, and send a ROUTER
// reply to every connection that claims the addressee's identity.
type Door struct {
	name       string // the channel, for logs
	socketType string // "ROUTER" or "PUB"
	sh         *Shared
	hold       bool // iopub: a lagging reader holds the writer up (Limits.QueueLimit)

	ln    net.Listener
	ready chan *conn // handshaken, for zmq4's Accept
	done  chan struct{}

	mu       sync.Mutex
	closed   bool
	conns    map[*conn]struct{}     // established
	shaking  map[net.Conn]time.Time // in handshake, with their start
	ids      map[string]*conn       // ROUTER: routing identity → its connection
	heldN    int                    // writers held up now (hold)
	heldFree chan struct{}          // closed when heldN drops to 0

	sendMu sync.Mutex // serialises Send
	fan    []*conn    // Send's snapshot of conns, under sendMu

	// PUB: how many connections subscribe to each topic, and who is told
	// when a topic gains its first subscriber (OnSubscribe).
	topics      map[string]int
	onSubscribe func(topic []byte)
}

// OnSubscribe has f called, on a PUB door, with every topic that gains
// its first subscriber among all connections: what an XPUB socket (without
// XPUB_VERBOSE) reports upstream, and what ipykernel ≥ 7.2 answers with an
// iopub_welcome. f must not block. Call it before clients connect.
func (d *Door) OnSubscribe(f func(topic []byte)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onSubscribe = f
}

// Topics returns the topics subscribed to now, by any connection.
func (d *Door) Topics() [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([][]byte, 0, len(d.topics))
	for t := range d.topics {
		out = append(out, []byte(t))
	}
	return out
}

// topic counts a connection's subscription (+1) or its end (-1), and says
// a first subscriber to OnSubscribe.
func (d *Door) topic(t string, delta int) {
	d.mu.Lock()
	if d.topics == nil {
		d.topics = map[string]int{}
	}
	d.topics[t] += delta
	n, f := d.topics[t], d.onSubscribe
	if n <= 0 {
		delete(d.topics, t)
	}
	d.mu.Unlock()
	if delta > 0 && n == 1 && f != nil {
		f([]byte(t))
	}
}

var doorSeq atomic.Int64

// Bind makes a zmq4 socket of type socketType ("ROUTER" or "PUB") listen on
// a Jupyter endpoint ("tcp://127.0.0.1:5555", "ipc:///path") through a new
// Door, and returns the door. hold is for iopub (see Door).
func Bind(sock zmq4.Socket, socketType, name, endpoint string, sh *Shared, hold bool) (*Door, error) {
	scheme, addr, ok := cutScheme(endpoint)
	if !ok || (scheme != "tcp" && scheme != "ipc") {
		return nil, fmt.Errorf("unsupported endpoint %q", endpoint)
	}
	d := &Door{name: name, socketType: socketType, sh: sh, hold: hold,
		ready: make(chan *conn, 64), done: make(chan struct{}),
		conns: map[*conn]struct{}{}, shaking: map[net.Conn]time.Time{}, ids: map[string]*conn{}}
	reg := fmt.Sprintf("tfgpu-door%d-%s", doorSeq.Add(1), scheme)
	if err := zmq4.RegisterTransport(reg, doorTransport{d, netOf(scheme)}); err != nil {
		return nil, err
	}
	if err := sock.Listen(reg + "://" + addr); err != nil {
		return nil, err
	}
	return d, nil
}

func cutScheme(ep string) (scheme, addr string, ok bool) {
	for i := 0; i+3 <= len(ep); i++ {
		if ep[i:i+3] == "://" {
			return ep[:i], ep[i+3:], true
		}
	}
	return "", "", false
}

func netOf(scheme string) string {
	if scheme == "ipc" {
		return "unix"
	}
	return "tcp"
}

// doorTransport is the zmq4 transport behind one Door.
type doorTransport struct {
	d       *Door
	network string
}

func (t doorTransport) Dial(context.Context, transport.Dialer, string) (net.Conn, error) {
	return nil, errors.New("zmtp: a door only listens")
}

func (t doorTransport) Listen(_ context.Context, addr string) (net.Listener, error) {
	if t.network == "unix" {
		removeStaleSocket(addr)
	}
	ln, err := net.Listen(t.network, addr)
	if err != nil {
		return nil, err
	}
	t.d.ln = ln
	go t.d.acceptLoop()
	return t.d, nil
}

func (t doorTransport) Addr(ep string) (string, error) { return endpointAddr(t.network, ep) }

// Accept hands zmq4 the next handshaken connection.
func (d *Door) Accept() (net.Conn, error) {
	select {
	case c := <-d.ready:
		return c, nil
	case <-d.done:
		// zmq4's accept loop retries at once on an error; its socket's
		// context is canceled before its listener is closed, so this is
		// reached only in a race, but never let it spin.
		time.Sleep(10 * time.Millisecond)
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every connection of the door.
func (d *Door) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	var err error
	if d.ln != nil {
		err = d.ln.Close()
	}
	var all []*conn
	for c := range d.conns {
		all = append(all, c)
	}
	for nc := range d.shaking {
		_ = nc.Close()
	}
	d.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
	return err
}

// Addr is the listening address.
func (d *Door) Addr() net.Addr { return d.ln.Addr() }

// Conns returns how many connections the door has: established and in
// handshake.
func (d *Door) Conns() (established, handshaking int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns), len(d.shaking)
}

// acceptLoop accepts connections and starts a handshake for each, backing
// off on errors (EMFILE, ENFILE, ENOBUFS) instead of spinning.
func (d *Door) acceptLoop() {
	var backoff time.Duration
	for {
		nc, err := d.ln.Accept()
		if err != nil {
			select {
			case <-d.done:
				return
			default:
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			d.sh.rl.warn("zmtp: accept failed; backing off", "socket", d.name, "err", err.Error(), "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-d.done:
				return
			}
			continue
		}
		backoff = 0
		if why := d.admit(nc); why != "" {
			_ = nc.Close()
			d.sh.rl.warn("zmtp: refused a connection", "socket", d.name, "peer", nc.RemoteAddr().String(), "why", why)
			continue
		}
		go d.handshake(nc)
	}
}

// admit counts nc in, or says why not. Past MaxHandshakes the oldest
// connection still in its handshake makes room.
func (d *Door) admit(nc net.Conn) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	lim := &d.sh.lim
	switch {
	case d.closed:
		return "closing"
	case len(d.conns)+len(d.shaking) >= lim.MaxConns:
		return fmt.Sprintf("%d connections on this socket (the limit)", lim.MaxConns)
	case !d.sh.fdRoom():
		return "too few file descriptors left (RLIMIT_NOFILE)"
	}
	if len(d.shaking) >= lim.MaxHandshakes {
		var oldest net.Conn
		var at time.Time
		for c, t := range d.shaking {
			if oldest == nil || t.Before(at) {
				oldest, at = c, t
			}
		}
		_ = oldest.Close() // its handshake fails and uncounts it
		d.sh.rl.warn("zmtp: closed the oldest unfinished handshake to make room", "socket", d.name,
			"peer", oldest.RemoteAddr().String())
	}
	d.shaking[nc] = time.Now()
	d.sh.conns.Add(1)
	return ""
}

// handshake does the server side of the ZMTP 3.0 handshake with one peer
// under HandshakeTimeout (see shake). A peer that passes becomes a conn for
// zmq4; one that does not is closed, and logged (rate-limited).
func (d *Door) handshake(nc net.Conn) {
	c, err := d.shake(nc)
	d.mu.Lock()
	delete(d.shaking, nc)
	closed := d.closed
	if err == nil {
		d.conns[c] = struct{}{}
	}
	d.mu.Unlock()
	if err == nil && closed {
		c.Close() // and forgotten, uncounted
		return
	}
	if err != nil {
		_ = nc.Close()
		d.sh.conns.Add(-1)
		if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
			d.sh.rl.warn("zmtp: handshake failed", "socket", d.name, "peer", nc.RemoteAddr().String(), "why", reason(err))
		}
		return
	}
	select {
	case d.ready <- c:
	case <-d.done:
		c.Close()
	}
}

// shake: NULL sends our greeting and READY in one write, then checks the
// peer's greeting and READY. CURVE sends our greeting, checks the peer's,
// then HELLO → WELCOME, INITIATE → READY (RFC 26), and the conn seals and
// opens every frame from then on.
func (d *Door) shake(nc net.Conn) (*conn, error) {
	lim := &d.sh.lim
	mech := d.sh.Mechanism()
	_ = nc.SetDeadline(time.Now().Add(lim.HandshakeTimeout))
	out := AppendGreetingMech(nil, mech, true)
	if mech == MechNull {
		out = AppendReady(out, d.socketType, nil)
	}
	if _, err := nc.Write(out); err != nil {
		return nil, err
	}
	rd := bufio.NewReaderSize(newRawReader(nc), readBuffer)
	// The signature's first and last bytes as soon as they come, as
	// libzmq does: an HTTP request or random bytes are refused at once,
	// not at the timeout.
	if b, err := rd.Peek(1); err != nil {
		return nil, err
	} else if b[0] != 0xFF {
		return nil, protoErr("no ZMTP signature")
	}
	if b, err := rd.Peek(10); err != nil {
		return nil, unexpected(err)
	} else if b[9] != 0x7F {
		return nil, protoErr("no ZMTP signature")
	}
	g, err := rd.Peek(GreetingLen)
	if err != nil {
		return nil, unexpected(err)
	}
	pg, err := ParseGreeting(g)
	if err != nil {
		return nil, err
	}
	if pg.Mechanism != mech {
		return nil, protoErr("mechanism %s; this socket speaks %s", pg.Mechanism, mech)
	}
	_, _ = rd.Discard(GreetingLen)

	var r Ready
	var cs *curveServer
	if mech == MechCurve {
		if pg.AsServer {
			return nil, protoErr("CURVE peer claims to be the server")
		}
		if r, cs, err = d.shakeCurve(nc, rd); err != nil {
			return nil, err
		}
	} else {
		body, err := readCommandFrame(rd, maxReady)
		if err != nil {
			return nil, err
		}
		if r, err = ParseReady(body); err != nil {
			return nil, err
		}
	}
	if !compatible(d.socketType, r.SocketType) {
		return nil, protoErr("a %s cannot connect to a %s", printable(r.SocketType), d.socketType)
	}
	c := newConn(nc, rd, d.sh)
	c.door = d
	c.swallow = 2 // zmq4 writes a greeting and a READY of its own
	if d.socketType == "ROUTER" {
		if err := d.claim(c, r.Identity); err != nil {
			return nil, err
		}
	} else {
		c.subs = map[string]int{}
	}
	plain := rd
	if cs != nil {
		c.seal = &sealer{cs: cs}
		plain = bufio.NewReaderSize(&opener{rd: rd, cs: cs, lim: lim, sh: d.sh}, readBuffer)
	}
	c.in = &inbound{rd: plain, pub: d.socketType == "PUB", lim: lim, budget: d.sh,
		hooks: inboundHooks{ping: c.pingReceived, pong: c.pongReceived, subscribe: c.subscribe}}
	c.in.pending = prelude(r.SocketType, c.identity, c.in.pub)
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// shakeCurve does the CurveZMQ commands of the handshake, after the
// greetings, and returns what the client's INITIATE says of it.
func (d *Door) shakeCurve(nc net.Conn, rd *bufio.Reader) (Ready, *curveServer, error) {
	cs, err := newCurveServer(d.sh.curve)
	if err != nil {
		return Ready{}, nil, err
	}
	body, err := readCommandFrame(rd, helloSize)
	if err != nil {
		return Ready{}, nil, err
	}
	welcome, err := cs.hello(body)
	if err != nil {
		return Ready{}, nil, err
	}
	if _, err := nc.Write(append(AppendFrameHeader(nil, FlagCommand, len(welcome)), welcome...)); err != nil {
		return Ready{}, nil, err
	}
	if body, err = readCommandFrame(rd, initiateMin+maxReady); err != nil {
		return Ready{}, nil, err
	}
	meta, err := cs.initiate(body)
	if err != nil {
		return Ready{}, nil, err
	}
	r, err := parseReadyMetadata(meta)
	if err != nil {
		return Ready{}, nil, err
	}
	ready, err := cs.ready(AppendProperty(nil, "Socket-Type", []byte(d.socketType)))
	if err != nil {
		return Ready{}, nil, err
	}
	if _, err := nc.Write(append(AppendFrameHeader(nil, FlagCommand, len(ready)), ready...)); err != nil {
		return Ready{}, nil, err
	}
	return r, cs, nil
}

// readCommandFrame reads one command frame of at most max bytes and
// returns its body.
func readCommandFrame(rd *bufio.Reader, max int) ([]byte, error) {
	h, _, err := peekHeader(rd)
	if err != nil {
		return nil, err
	}
	if !h.Command() {
		return nil, protoErr("a message before the handshake's end")
	}
	if h.Size > uint64(max) {
		return nil, protoErr("handshake command of %d bytes", h.Size)
	}
	_, _ = rd.Discard(h.Len)
	body := make([]byte, h.Size)
	if _, err := io.ReadFull(rd, body); err != nil {
		return nil, unexpected(err)
	}
	return body, nil
}

// prelude is what zmq4 reads first from a handshaken conn: a canonical
// greeting and READY carrying the peer's socket type and the identity zmq4
// is to route by, and on iopub a subscription to everything (topics are
// filtered by the conn itself, see conn.subscribed).
func prelude(socketType, identity string, pub bool) []byte {
	b := AppendGreeting(nil, false)
	var id []byte
	if identity != "" {
		id = []byte(identity)
	}
	b = AppendReady(b, socketType, id)
	if pub {
		b = append(b, 0, 1, 1)
	}
	return b
}

// claim gives c its routing identity. An empty one, or one starting with a
// zero byte (libzmq reserves those for identities it makes up), is replaced
// by a random one. An identity another live connection holds is refused
// when that connection answers a PING within ProbeTimeout (libzmq's ROUTER
// refuses duplicates too; ipykernel's ROUTER_HANDOVER would instead hand a
// client's replies to whoever claims its identity, which any local user
// can read off iopub); when it does not answer, it is dead or hung and is
// closed, and the identity handed over.
func (d *Door) claim(c *conn, id []byte) error {
	if len(id) == 0 || id[0] == 0 {
		var b [9]byte
		_, _ = rand.Read(b[1:])
		c.identity = string(b[:])
		d.mu.Lock()
		d.ids[c.identity] = c
		d.mu.Unlock()
		return nil
	}
	key := string(id)
	for {
		d.mu.Lock()
		old := d.ids[key]
		if old == nil {
			d.ids[key] = c
			c.identity = key
			d.mu.Unlock()
			return nil
		}
		d.mu.Unlock()
		if old.alive(d.sh.lim.ProbeTimeout) {
			d.sh.rl.warn("zmtp: refused a connection claiming the identity of a live client",
				"socket", d.name, "peer", c.RemoteAddr().String())
			return protoErr("identity held by a live client")
		}
		d.sh.rl.warn("zmtp: handed an identity over from a client that did not answer a PING",
			"socket", d.name, "peer", c.RemoteAddr().String(), "old_peer", old.RemoteAddr().String())
		old.closeWith("identity handed over")
		d.forget(old, nil)
	}
}

// forget removes a closed conn from the door.
func (d *Door) forget(c *conn, subs map[string]int) {
	d.mu.Lock()
	if _, ok := d.conns[c]; ok {
		delete(d.conns, c)
		d.sh.conns.Add(-1)
	}
	if c.identity != "" && d.ids[c.identity] == c {
		delete(d.ids, c.identity)
	}
	d.mu.Unlock()
	for t := range subs {
		d.topic(t, -1)
	}
}

// hold1 counts a writer held up (+1) or let go (-1).
func (d *Door) hold1(delta int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.heldN += delta
	if d.heldN == 0 && d.heldFree != nil {
		close(d.heldFree)
		d.heldFree = nil
	}
}

// WaitRoom blocks while a writer to one of the door's connections is held
// up by a lagging reader, or until ctx ends: the relay then stops reading
// the kernel, so the kernel waits for a slow client and nothing piles up
// in between.
func (d *Door) WaitRoom(ctx context.Context) {
	d.mu.Lock()
	if d.heldN == 0 {
		d.mu.Unlock()
		return
	}
	if d.heldFree == nil {
		d.heldFree = make(chan struct{})
	}
	ch := d.heldFree
	d.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// removeStaleSocket unlinks a socket file left by a process that was
// SIGKILLed, as libzmq does before binding. Only a socket is removed.
func removeStaleSocket(path string) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
}
