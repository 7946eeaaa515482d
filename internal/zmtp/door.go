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
	"syscall"
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
	conns    map[*conn]struct{}      // established
	shaking  map[net.Conn]*shakeInfo // in handshake
	ids      map[string]*conn        // ROUTER: routing identity (slotID) → its connection
	reserved map[string]reservation  // ROUTER: identities kept for their holder's reconnect
	holders  map[string]holder       // ROUTER: claimed identity → its peer and connections
	anySlot  bool                    // ROUTER: Send falls back to another slot (RouteToAnySlot)
	heldN    int                     // connections holding the writer up now (hold)
	heldFree chan struct{}           // closed when heldN drops to 0

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
		conns: map[*conn]struct{}{}, shaking: map[net.Conn]*shakeInfo{}, ids: map[string]*conn{},
		reserved: map[string]reservation{}, holders: map[string]holder{}}
	if socketType == "ROUTER" {
		sh.adopt(d) // what Keep left for this socket, before the first claim
	}
	reg := fmt.Sprintf("tfgpu-door%d-%s", doorSeq.Add(1), scheme)
	if err := zmq4.RegisterTransport(reg, doorTransport{d, netOf(scheme)}); err != nil {
		sh.disown(d)
		return nil, err
	}
	if err := sock.Listen(reg + "://" + addr); err != nil {
		sh.disown(d)
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
	d.sh.disown(d)
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
		p := peerOf(nc)
		if why := d.admit(nc, p); why != "" {
			_ = nc.Close()
			d.sh.rl.warn("zmtp: refused a connection", "socket", d.name, "peer", nc.RemoteAddr().String(), "who", p.key, "why", why)
			continue
		}
		go d.handshake(nc, p)
	}
}

// shakeInfo is a connection in its handshake.
type shakeInfo struct {
	start time.Time
	peer  peer
}

// admit counts nc, from p, in, or says why not. The connection and
// handshake limits are shared fairly between peers: at a limit, the peer
// with the most connections (handshakes) loses its newest (oldest) one to
// make room, and a newcomer from that peer itself is refused; so one
// user's flood never locks another user's client out.
func (d *Door) admit(nc net.Conn, p peer) string {
	var evict []func()
	defer func() { // conns are closed outside d.mu (their lock comes first)
		for _, f := range evict {
			f()
		}
	}()
	d.mu.Lock()
	defer d.mu.Unlock()
	lim := &d.sh.lim
	if d.closed {
		return "closing"
	}
	if full, fds := len(d.conns)+len(d.shaking) >= lim.MaxConns, !d.sh.fdRoom(); full || fds {
		why := fmt.Sprintf("%d connections on this socket (the limit)", lim.MaxConns)
		if fds {
			why = "too few file descriptors left (RLIMIT_NOFILE)"
		}
		f := d.crowdedLocked(p, false)
		if f == nil {
			return why + "; this peer has the most"
		}
		evict = append(evict, f)
		d.sh.rl.warn("zmtp: closed a connection of the peer with the most to make room", "socket", d.name, "for", p.key, "why", why)
	}
	if len(d.shaking) >= lim.MaxHandshakes {
		if f := d.crowdedLocked(p, true); f != nil {
			evict = append(evict, f)
		}
	}
	d.shaking[nc] = &shakeInfo{start: time.Now(), peer: p}
	d.sh.conns.Add(1)
	return ""
}

// crowdedLocked picks, to make room for a newcomer from p, a connection of
// the peer with the most on this door (counting the newcomer), and returns
// what closes it: among handshakes only (shaking) the oldest handshake,
// else the newest established connection, else the oldest handshake. It
// returns nil when p is that peer and has nothing in handshake to give up
// (shaking) or at all (the newcomer is refused). Called with d.mu held.
func (d *Door) crowdedLocked(p peer, shaking bool) func() {
	count := map[string]int{p.key: 1}
	for _, si := range d.shaking {
		count[si.peer.key]++
	}
	if !shaking {
		for c := range d.conns {
			count[c.peer.key]++
		}
	}
	top, most := p.key, count[p.key] // a tie goes against the newcomer's peer
	for k, n := range count {
		if n > most {
			top, most = k, n
		}
	}
	if top == p.key && !shaking {
		return nil
	}
	var newest *conn
	if !shaking {
		for c := range d.conns {
			if c.peer.key == top && (newest == nil || c.since.After(newest.since)) {
				newest = c
			}
		}
	}
	if newest != nil {
		return func() { newest.closeWith("made room for another peer") }
	}
	var oldest net.Conn
	var at time.Time
	for nc, si := range d.shaking {
		if si.peer.key == top && (oldest == nil || si.start.Before(at)) {
			oldest, at = nc, si.start
		}
	}
	if oldest == nil {
		return nil
	}
	return func() { _ = oldest.Close() } // its handshake fails and uncounts it
}

// handshake does the server side of the ZMTP 3.0 handshake with one peer
// under HandshakeTimeout (see shake). A peer that passes becomes a conn for
// zmq4; one that does not is closed, and logged (rate-limited).
func (d *Door) handshake(nc net.Conn, p peer) {
	c, err := d.shake(nc, p)
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
		switch {
		case errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF):
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
			// A client that connects and closes at once (Jupyter's server
			// does so when a notebook opens): ordinary, not a warning.
			d.sh.log.Debug("zmtp: a connection closed during its handshake", "socket", d.name, "peer", nc.RemoteAddr().String(), "why", reason(err))
		default:
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
func (d *Door) shake(nc net.Conn, p peer) (*conn, error) {
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
	raw := newRawReader(nc)
	rd := bufio.NewReaderSize(raw, readBuffer)
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
	c.door, c.peer, c.since = d, p, time.Now()
	// Only the kernel's owner (or, with CURVE, a holder of the key) may
	// hold iopub's writer up; anyone else is a subscriber as libzmq's PUB
	// has them: past its queue it misses messages (attack G).
	c.mayHold = d.hold && (d.sh.curve != nil || p.uid == os.Geteuid())
	c.swallow = 2 // zmq4 writes a greeting and a READY of its own
	if d.socketType == "ROUTER" {
		if err := d.claim(c, r.Identity); err != nil {
			return nil, err
		}
	} else {
		c.subs = map[string]int{}
	}
	c.acct = &recvAcct{peer: p.key, name: d.name, addr: nc.RemoteAddr().String(), close: func() { c.closeWith("receive budget") }}
	prog := &progress{nc: nc, idle: lim.MessageIdle}
	raw.prog = prog // from here on: the handshake's deadline is cleared below
	plain := rd
	if cs != nil {
		c.seal = &sealer{cs: cs}
		plain = bufio.NewReaderSize(&opener{rd: rd, cs: cs, lim: lim, sh: d.sh, acct: c.acct, prog: prog}, readBuffer)
	}
	c.in = &inbound{rd: plain, pub: d.socketType == "PUB", lim: lim, budget: d.sh, acct: c.acct, prog: prog,
		hooks: inboundHooks{ping: c.pingReceived, subscribe: c.subscribe}}
	d.sh.register(c.acct)
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
// by a random one.
//
// An identity belongs to the peer (the user, see peer) whose connections
// hold it, and for ReserveFor after the last of them closes, to its
// reconnect: a claim from another peer is refused at once, so no other user
// can take a client's replies, whether it races the client's reconnect or
// not (attack B; ipykernel's ROUTER_HANDOVER would hand them over, and any
// local user reads the identities off iopub).
//
// The holder's own peer may hold it on several connections at once: two
// clients of one session (jupyter_client's KernelManager.client() called
// twice gives both the session's identity), or a client reconnecting while
// its old connection is not yet seen closed. Each such connection is a
// slot of the identity: slot 0 routes by the identity itself, slot k by
// slotID(identity, k), which zmq4 is given as that connection's identity,
// so the kernel's replies go back to the connection that sent the request
// and never to the other (docs/design.md#routing-identities). A client
// connects its channels together, so its slots agree across the doors;
// where they do not, stdin falls back to the identity's lowest slot (see
// Send).
func (d *Door) claim(c *conn, id []byte) error {
	if len(id) == 0 || id[0] == 0 {
		var b [9]byte
		for b[1] == 0 || b[1] == slotMark {
			_, _ = rand.Read(b[1:])
		}
		c.identity = string(b[:])
		d.mu.Lock()
		d.ids[c.identity] = c
		d.mu.Unlock()
		return nil
	}
	key := string(id)
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.reserved[key]; ok {
		if r.peer != c.peer.key && time.Now().Before(r.until) {
			d.sh.rl.warn("zmtp: refused a connection claiming the identity of a client that is reconnecting",
				"socket", d.name, "peer", c.RemoteAddr().String(), "who", c.peer.key, "holder", r.peer)
			return protoErr("identity reserved for its holder's reconnect")
		}
		delete(d.reserved, key)
	}
	h := d.holders[key]
	switch {
	case h.n > 0 && h.peer != c.peer.key:
		d.sh.rl.warn("zmtp: refused a connection claiming the identity of another peer's client",
			"socket", d.name, "peer", c.RemoteAddr().String(), "who", c.peer.key, "holder", h.peer)
		return protoErr("identity held by another peer's client")
	case h.n >= maxSlots:
		d.sh.rl.warn("zmtp: refused a connection: its identity is held by too many connections",
			"socket", d.name, "peer", c.RemoteAddr().String(), "connections", h.n)
		return protoErr("identity held by %d connections", h.n)
	}
	for k := range maxSlots {
		sid := slotID(key, k)
		if d.ids[sid] == nil {
			d.ids[sid] = c
			c.identity, c.claimed = sid, key
			if d.holders == nil {
				d.holders = map[string]holder{}
			}
			d.holders[key] = holder{peer: c.peer.key, n: h.n + 1}
			if h.n == 0 {
				d.sh.ownedChanged()
			}
			return nil
		}
	}
	return protoErr("identity held by %d connections", h.n) // not reached: n < maxSlots
}

// holder is who holds a claimed identity, on how many connections.
type holder struct {
	peer string
	n    int
}

// maxSlots bounds the connections of one peer holding one identity.
const maxSlots = 64

// slotMark is the second byte of a slot's routing identity (after the
// zero byte no client may claim); random identities never have it.
const slotMark = 0xFE

// slotID is the routing identity of slot k of identity id: id itself for
// slot 0, else a zero byte, slotMark, k, id; no client can claim it.
func slotID(id string, k int) string {
	if k == 0 {
		return id
	}
	return string([]byte{0, slotMark, byte(k)}) + id
}

// claimedOf is the identity a client claimed, from a routing identity
// (slot 0's or slot k's); "" for a random one.
func claimedOf(rid string) string {
	switch {
	case rid == "":
		return ""
	case rid[0] != 0:
		return rid
	case len(rid) > 3 && rid[1] == slotMark:
		return rid[3:]
	}
	return ""
}

// A reservation keeps an identity whose connection closed for a reconnect
// from the same peer.
type reservation struct {
	peer  string
	until time.Time
}

// ReserveFor is how long an identity waits for its holder's reconnect
// (libzmq reconnects after 100 ms), within one supervisor and, through
// [Shared.Keep], across its restart; maxReserved bounds the reservations
// of one door, so that a peer making up identities cannot grow the map.
const (
	ReserveFor  = 30 * time.Second
	maxReserved = 4096
)

// forget removes a closed conn from the door, keeping its identity for its
// reconnect.
func (d *Door) forget(c *conn, subs map[string]int) {
	d.mu.Lock()
	if _, ok := d.conns[c]; ok {
		delete(d.conns, c)
		d.sh.conns.Add(-1)
	}
	if c.identity != "" && d.ids[c.identity] == c {
		delete(d.ids, c.identity)
		if c.claimed != "" {
			if h := d.holders[c.claimed]; h.n > 1 {
				d.holders[c.claimed] = holder{peer: h.peer, n: h.n - 1}
			} else {
				delete(d.holders, c.claimed)
				d.reserveLocked(c.claimed, c.peer.key, time.Now().Add(ReserveFor))
				d.sh.ownedChanged()
			}
		}
	}
	d.mu.Unlock()
	for t := range subs {
		d.topic(t, -1)
	}
}

// reserveLocked keeps id for peer until until. Past maxReserved, expired
// reservations go, then those of the peer with the most. Called with d.mu
// held.
func (d *Door) reserveLocked(id, peer string, until time.Time) {
	now := time.Now()
	if d.reserved == nil {
		d.reserved = map[string]reservation{}
	}
	if len(d.reserved) >= maxReserved {
		byPeer := map[string]int{}
		for k, r := range d.reserved {
			if now.After(r.until) {
				delete(d.reserved, k)
			} else {
				byPeer[r.peer]++
			}
		}
		if len(d.reserved) >= maxReserved {
			top, most := peer, byPeer[peer]
			for p, n := range byPeer {
				if n > most {
					top, most = p, n
				}
			}
			for k, r := range d.reserved {
				if r.peer == top {
					delete(d.reserved, k)
				}
			}
		}
	}
	d.reserved[id] = reservation{peer: peer, until: until}
}

// hold1 counts a connection holding the writer up (+1) or letting go (-1).
func (d *Door) hold1(delta int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.heldN += delta
	if d.heldN == 0 && d.heldFree != nil {
		close(d.heldFree)
		d.heldFree = nil
	}
}

// WaitRoom blocks while a connection of the kernel's owner lags behind the
// door's output (its queue past Limits.QueueLimit while it reads), or until
// ctx ends: the relay then stops reading the kernel, so the kernel waits
// for a slow client and nothing piles up in between. It waits at most
// Limits.HoldFor per call, and no longer for a connection that stopped
// reading (StallAfter): such a connection's hold is spent, and until it has
// caught up it misses messages instead (conn.full), so no reader can slow
// the kernel's output for long. Connections of other peers never hold it
// (conn.mayHold); the supervisor's own messages never wait (only the
// relay's copy of the kernel's output calls WaitRoom).
func (d *Door) WaitRoom(ctx context.Context) {
	var deadline time.Time
	for {
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
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(d.sh.lim.HoldFor)
		}
		t := time.NewTimer(min(deadline.Sub(now), d.sh.lim.StallAfter/2) + time.Millisecond)
		select {
		case <-ch:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			return
		}
		d.spendHolds(time.Now().After(deadline))
	}
}

// spendHolds ends the hold of every connection that stopped reading, or of
// every lagging one when all is set.
func (d *Door) spendHolds(all bool) {
	d.mu.Lock()
	lagging := make([]*conn, 0, d.heldN)
	for c := range d.conns {
		lagging = append(lagging, c)
	}
	d.mu.Unlock()
	for _, c := range lagging { // each conn's lock before the door's
		c.mu.Lock()
		if c.lagSet && (all || c.stalled()) {
			c.spendHold()
		}
		c.mu.Unlock()
	}
}

// removeStaleSocket unlinks a socket file left by a process that was
// SIGKILLed, as libzmq does before binding. Only a socket is removed.
func removeStaleSocket(path string) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
}
