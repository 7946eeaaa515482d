package zmtp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// Admission and the handshake: the accept loop, the per-peer limits on
// connections and handshakes, and the ZMTP handshake (NULL or CURVE) that
// turns an accepted connection into a conn that serve reads.

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
// under HandshakeTimeout (see shake). A peer that passes becomes a conn
// whose messages serve reads; one that does not is closed, and logged
// (rate-limited).
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
	go d.serve(c)
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
	c.established = true // the handshake was ours
	// Only the kernel's owner (or, with CURVE, a holder of the key) may
	// hold iopub's writer up; anyone else is a subscriber as libzmq's PUB
	// has them: past its queue it misses messages (attack G).
	c.mayHold = d.hold && (d.sh.curve != nil || p.uid == os.Geteuid())
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
	c.in = &inbound{rd: rd, pub: d.socketType == "PUB", lim: lim, budget: d.sh, acct: c.acct, prog: prog,
		hooks: inboundHooks{ping: c.pingReceived, subscribe: c.subscribe}}
	if cs != nil {
		c.seal = cs
		c.in.open = &opener{rd: rd, cs: cs, lim: lim, prog: prog}
	}
	d.sh.register(c.acct)
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
