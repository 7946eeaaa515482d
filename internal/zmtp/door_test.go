package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// bound is a Door, and the socket the tests use it as.
type bound struct {
	sock doorSock
	door *Door
	sh   *Shared
	addr string // host:port
	log  *strings.Builder
}

// doorSock is a door as a zmq4 socket: what the tests receive from it and
// send through it.
type doorSock struct{ d *Door }

func (s doorSock) Recv() (zmq4.Msg, error) {
	m, err := s.d.Recv(context.Background())
	return zmq4.NewMsgFrom(m...), err
}
func (s doorSock) Send(m zmq4.Msg) error      { return s.d.Send(m.Frames) }
func (s doorSock) SendMulti(m zmq4.Msg) error { return s.d.Send(m.Frames) }
func (s doorSock) Close() error               { return s.d.Close() }

// bindWith binds a door on a free loopback port, closed at the test's end.
func bindWith(tb testing.TB, socketType, name string, sh *Shared, hold bool) *bound {
	tb.Helper()
	d, err := Bind(socketType, name, "tcp://127.0.0.1:0", sh, hold)
	testutil.NoErr(tb, err)
	tb.Cleanup(func() { d.Close() })
	return &bound{sock: doorSock{d}, door: d, sh: sh, addr: d.Addr().String()}
}

// readTopics reads up to n messages (2 s at most) and returns their
// first frames.
func readTopics(p *rawPeer, n int) []string {
	var out []string
	p.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for len(out) < n {
		m, err := p.readMessage(false)
		if err != nil {
			break
		}
		out = append(out, string(m[0]))
	}
	return out
}

// noReplay ends a PUB door's replay window (ReplayFor) at once, for tests
// of what a late subscriber gets from then on.
func noReplay(b *bound) *bound {
	b.door.sendMu.Lock()
	b.door.replayUntil = time.Now().Add(-time.Millisecond)
	b.door.sendMu.Unlock()
	return b
}

func bindDoor(t *testing.T, socketType string, lim Limits) *bound {
	t.Helper()
	return bindWith(t, socketType, strings.ToLower(socketType), NewShared(lim, nil), false)
}

// rawPeer is a hand-driven ZMTP peer: what a hostile local user runs.
type rawPeer struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawPeer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	testutil.NoErr(t, err)
	t.Cleanup(func() { c.Close() })
	return &rawPeer{t: t, c: c, r: bufio.NewReader(c)}
}

func (p *rawPeer) send(b []byte) error {
	_, err := p.c.Write(b)
	return err
}

// handshake sends a greeting and READY and reads the door's.
func (p *rawPeer) handshake(socketType string, identity []byte) {
	p.t.Helper()
	out := AppendGreeting(nil, false)
	out = AppendReady(out, socketType, identity)
	testutil.NoErr(p.t, p.send(out))
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	g := make([]byte, GreetingLen)
	if _, err := io.ReadFull(p.r, g); err != nil {
		p.t.Fatalf("no greeting from the door: %v", err)
	}
	if _, err := ParseGreeting(g); err != nil {
		p.t.Fatal(err)
	}
	h, body, err := p.readFrame()
	if err != nil || !h.Command() {
		p.t.Fatalf("no READY from the door: %+v %v", h, err)
	}
	if _, err := ParseReady(body); err != nil {
		p.t.Fatal(err)
	}
	p.c.SetReadDeadline(time.Time{})
}

func (p *rawPeer) readFrame() (FrameHeader, []byte, error) {
	h, err := readFrameHeader(p.r)
	if err != nil {
		return h, nil, err
	}
	if h.Size > 1<<24 {
		return h, nil, fmt.Errorf("frame of %d bytes", h.Size)
	}
	b := make([]byte, h.Size)
	_, err = io.ReadFull(p.r, b)
	return h, b, err
}

// readMessage reads the next message, answering PINGs (as libzmq does)
// when pong is set and skipping other commands.
func (p *rawPeer) readMessage(pong bool) ([][]byte, error) {
	var frames [][]byte
	for {
		h, body, err := p.readFrame()
		if err != nil {
			return nil, err
		}
		if h.Command() {
			name, data, _ := ParseCommand(body)
			if name == "PING" && pong {
				ping, _ := ParsePing(data)
				p.send(AppendCommand(nil, "PONG", ping.Context))
			}
			continue
		}
		frames = append(frames, body)
		if !h.More() {
			return frames, nil
		}
	}
}

// closedWithin reports whether the door closes the connection within d
// (reading and discarding whatever comes first).
func (p *rawPeer) closedWithin(d time.Duration) bool {
	p.c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, p.r)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func message(frames ...[]byte) []byte {
	var b []byte
	for i, f := range frames {
		flags := byte(FlagMore)
		if i == len(frames)-1 {
			flags = 0
		}
		b = AppendFrameHeader(b, flags, len(f))
		b = append(b, f...)
	}
	return b
}

// zmqClient connects a zmq4 socket of type typ to addr.
func zmqClient(t *testing.T, typ zmq4.SocketType, addr string, opts ...zmq4.Option) zmq4.Socket {
	t.Helper()
	var s zmq4.Socket
	ctx := context.Background()
	switch typ {
	case zmq4.Dealer:
		s = zmq4.NewDealer(ctx, opts...)
	case zmq4.Sub:
		s = zmq4.NewSub(ctx, opts...)
		s.SetOption(zmq4.OptionSubscribe, "")
	}
	testutil.NoErr(t, s.Dial("tcp://"+addr))
	t.Cleanup(func() { s.Close() })
	return s
}

func recvWithin(t *testing.T, s interface{ Recv() (zmq4.Msg, error) }, d time.Duration) (zmq4.Msg, error) {
	t.Helper()
	return recvMatching(s, d, func(zmq4.Msg) bool { return true })
}

// roundTrip checks a zmq4 DEALER can talk through the ROUTER door.
func roundTrip(t *testing.T, b *bound, id string) {
	t.Helper()
	cl := zmqClient(t, zmq4.Dealer, b.addr, zmq4.WithID(zmq4.SocketIdentity(id)))
	testutil.NoErr(t, cl.SendMulti(zmq4.NewMsgFrom([]byte("hello"), []byte(id))))
	m, err := recvWithin(t, b.sock, 5*time.Second)
	if err != nil {
		t.Fatalf("router got nothing: %v", err)
	}
	if len(m.Frames) != 3 || string(m.Frames[0]) != id || string(m.Frames[2]) != id {
		t.Fatalf("router got %q", m.Frames)
	}
	testutil.NoErr(t, b.sock.SendMulti(zmq4.NewMsgFrom([]byte(id), []byte("reply"))))
	r, err := recvWithin(t, cl, 5*time.Second)
	if err != nil || len(r.Frames) != 1 || string(r.Frames[0]) != "reply" {
		t.Fatalf("client got %q %v", r.Frames, err)
	}
	cl.Close()
}

func TestDoorRelaysZmq4Clients(t *testing.T) {
	b := bindDoor(t, "ROUTER", Limits{})
	roundTrip(t, b, "client-1")
	// A large frame (staged) arrives whole.
	cl := zmqClient(t, zmq4.Dealer, b.addr, zmq4.WithID(zmq4.SocketIdentity("big")))
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB
	cl.SendMulti(zmq4.NewMsgFrom([]byte("x"), big))
	m, err := recvWithin(t, b.sock, 10*time.Second)
	if err != nil || len(m.Frames) != 3 || !bytes.Equal(m.Frames[2], big) {
		t.Fatalf("big message: %d frames, %v", len(m.Frames), err)
	}
}

// A connection that sends nothing holds up no one, and is closed at the
// handshake timeout.
func TestDoorSilentPeerBlocksNobody(t *testing.T) {
	b := bindDoor(t, "ROUTER", Limits{HandshakeTimeout: 500 * time.Millisecond})
	silent := make([]*rawPeer, 5)
	for i := range silent {
		silent[i] = dialRaw(t, b.addr)
	}
	testutil.WaitFor(t, 5*time.Second, "the silent handshakes", func() bool { _, h := b.door.Conns(); return h == len(silent) })
	roundTrip(t, b, "after-silent")
	if _, h := b.door.Conns(); h != len(silent) {
		t.Fatalf("%d silent peers in handshake after the round trip, want %d still waiting: the round trip waited for them", h, len(silent))
	}
	for i, p := range silent {
		if !p.closedWithin(3 * time.Second) {
			t.Fatalf("silent peer %d still connected after the handshake timeout", i)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "handshakes to end", func() bool { _, n := b.door.Conns(); return n == 0 })
}

// Every rule a peer can break costs it its connection, nothing else.
func TestDoorClosesRuleBreakers(t *testing.T) {
	ready := func(typ string) []byte { return AppendReady(AppendGreeting(nil, false), typ, nil) }
	long := func(size uint64) []byte {
		return binary.BigEndian.AppendUint64([]byte{FlagLong}, size)
	}
	for _, tc := range []struct {
		name, door string
		bytes      []byte
	}{
		{"bad signature", "ROUTER", append([]byte{0x00}, make([]byte, 63)...)},
		{"ZMTP 2.0 greeting", "ROUTER", greeting(func(g []byte) { g[10] = 2 })},
		{"PLAIN mechanism", "ROUTER", greeting(func(g []byte) { copy(g[12:], "PLAIN") })},
		{"message before READY", "ROUTER", append(greeting(nil), message([]byte("hi"))...)},
		{"READY name overrun", "ROUTER", append(greeting(nil), AppendCommand(nil, "READY", []byte{200, 'a'})...)},
		{"READY value overrun", "ROUTER", append(greeting(nil), AppendCommand(nil, "READY", []byte("\x0bSocket-Type\xff\xff\xff\xffDEALER"))...)},
		{"READY declared 1 GiB", "ROUTER", append(append(greeting(nil), FlagCommand|FlagLong), binary.BigEndian.AppendUint64(nil, 1<<30)...)},
		{"PUB peer on a ROUTER", "ROUTER", ready("PUB")},
		{"DEALER on the PUB", "PUB", ready("DEALER")},
		{"frame of 2^62 bytes", "ROUTER", append(ready("DEALER"), long(1<<62)...)},
		{"frame over MaxMessage", "ROUTER", append(ready("DEALER"), long(2<<20)...)},
		{"message over MaxMessage in frames", "ROUTER", append(ready("DEALER"), bytes.Repeat(append(append([]byte{FlagMore | FlagLong}, binary.BigEndian.AppendUint64(nil, 600<<10)...), make([]byte, 600<<10)...), 2)...)},
		{"too many frames", "ROUTER", append(ready("DEALER"), bytes.Repeat([]byte{FlagMore, 0}, 20)...)},
		{"reserved flags", "ROUTER", append(ready("DEALER"), 0x10, 1, 'x')},
		{"command with MORE", "ROUTER", append(ready("DEALER"), FlagCommand|FlagMore, 0)},
		{"command inside a message", "ROUTER", append(append(ready("DEALER"), FlagMore, 1, 'x'), AppendPing(nil, nil)...)},
		{"empty command", "ROUTER", append(ready("DEALER"), FlagCommand, 0)},
		{"command name overrun", "ROUTER", append(ready("DEALER"), FlagCommand, 3, 200, 'P', 'I')},
		{"unknown command", "ROUTER", append(ready("DEALER"), AppendCommand(nil, "HELLO", nil)...)},
		{"second READY", "ROUTER", append(ready("DEALER"), AppendReady(nil, "DEALER", nil)...)},
		{"SUBSCRIBE on a ROUTER", "ROUTER", append(ready("DEALER"), AppendCommand(nil, "SUBSCRIBE", nil)...)},
		{"short PING", "ROUTER", append(ready("DEALER"), AppendCommand(nil, "PING", []byte{0})...)},
		{"command of 8 KiB", "ROUTER", append(ready("DEALER"), AppendCommand(nil, "PING", make([]byte, 8<<10))...)},
		{"frame of 2^62 bytes on iopub", "PUB", append(ready("SUB"), long(1<<62)...)},
		{"too many subscriptions", "PUB", append(ready("SUB"), bytes.Repeat(message([]byte("\x01same")), 1)...)},
		{"topic of 300 bytes", "PUB", append(ready("SUB"), message(append([]byte{1}, make([]byte, 300)...))...)},
		{"ERROR command", "PUB", append(ready("SUB"), AppendCommand(nil, "ERROR", []byte("\x03bye"))...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := Limits{MaxMessage: 1 << 20, MaxFrames: 10}
			in := tc.bytes
			if tc.name == "too many subscriptions" {
				lim.MaxSubscriptions = 3
				for i := range 5 {
					in = append(in, message([]byte(fmt.Sprintf("\x01topic-%d", i)))...)
				}
			}
			b := bindDoor(t, tc.door, lim)
			p := dialRaw(t, b.addr)
			p.send(in)
			if !p.closedWithin(3 * time.Second) {
				t.Fatal("the door kept the connection")
			}
			testutil.WaitFor(t, 5*time.Second, "the connection to be forgotten", func() bool {
				e, h := b.door.Conns()
				return e+h == 0 && b.sh.conns.Load() == 0 && b.sh.receiving.Load() == 0
			})
			if tc.door == "ROUTER" {
				roundTrip(t, b, "honest")
			}
		})
	}
}

// PINGs are answered with their context; a peer that never reads its
// PONGs makes the supervisor hold no more than PongQueue for it.
func TestDoorAnswersPingsWithinBounds(t *testing.T) {
	b := bindDoor(t, "ROUTER", Limits{PongQueue: 4 << 10})
	p := dialRaw(t, b.addr)
	p.handshake("DEALER", []byte("pinger"))
	p.send(AppendPing(nil, []byte("ctx-1")))
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, body, err := p.readFrame()
	name, data, _ := ParseCommand(body)
	if err != nil || !h.Command() || name != "PONG" || string(data) != "ctx-1" {
		t.Fatalf("got %+v %q %v", h, body, err)
	}

	flood := dialRaw(t, b.addr)
	flood.handshake("DEALER", []byte("flood"))
	if tc, ok := flood.c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	// The door's send buffer small too, so that unanswered PONGs pile up
	// in the conn's queue (the bound under test) rather than in the kernel
	// (loopback would take a megabyte).
	testutil.WaitFor(t, 5*time.Second, "the flooder's conn", func() bool {
		b.door.mu.Lock()
		defer b.door.mu.Unlock()
		for c := range b.door.conns {
			if c.identity == "flood" {
				if tc, ok := c.Conn.(*net.TCPConn); ok {
					tc.SetWriteBuffer(4096)
				}
				return true
			}
		}
		return false
	})
	// Up to 300 000 PINGs, never reading a PONG, written from a goroutine.
	// With the peer's receive buffer full, loopback TCP stalls the peer's
	// own sends sooner or later (seen after 6 000 PINGs in CI, and as a
	// hang of the writes, with the door's reader waiting in read(2)): that
	// costs only the peer. So the test takes what the door has read once
	// it reaches 50 000 PINGs, or stops rising at 3 000 or more (63 KB of
	// PONGs, well past PongQueue and the socket buffers); the cleanup's
	// Close ends the writer.
	pings := bytes.Repeat(AppendPing(nil, []byte("0123456789abcdef")), 1000)
	go func() {
		for range 300 {
			if flood.send(pings) != nil {
				return
			}
		}
	}()
	var held, read int64
	readNow := func() {
		b.door.mu.Lock()
		defer b.door.mu.Unlock()
		for c := range b.door.conns {
			if c.identity == "flood" {
				c.mu.Lock()
				held = c.queued
				c.mu.Unlock()
				read = c.pings.Load()
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for last, since := int64(-1), time.Now(); read < 50000; time.Sleep(5 * time.Millisecond) {
		readNow()
		if read != last {
			last, since = read, time.Now()
		}
		if read >= 3000 && time.Since(since) > 2*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the door read %d PINGs in 30 s", read)
		}
	}
	t.Logf("the door read %d PINGs; %d bytes queued for the flooder", read, held)
	if held > 4<<10+64 {
		t.Fatalf("%d bytes of PONGs queued for a peer that never reads", held)
	}
	roundTrip(t, b, "honest")
}

// iopub: whatever a subscriber sends that is not a subscription is read
// and dropped, topics are honoured, and a peer without a subscription
// gets nothing.
func TestDoorSubscriptions(t *testing.T) {
	b := bindDoor(t, "PUB", Limits{})
	sub := func(topics ...string) *rawPeer {
		p := dialRaw(t, b.addr)
		p.handshake("SUB", nil)
		for i := range 200 { // junk first: it must not block the reader
			p.send(message([]byte(fmt.Sprintf("junk %d", i)), []byte("more junk")))
		}
		for _, tp := range topics {
			p.send(message(append([]byte{1}, tp...)))
		}
		return p
	}
	all, kernel, none := sub(""), sub("kernel.a", "kernel.b"), sub()
	v31 := dialRaw(t, b.addr) // ZMTP 3.1 style: SUBSCRIBE and CANCEL commands
	v31.handshake("SUB", nil)
	v31.send(AppendCommand(nil, "SUBSCRIBE", []byte("kernel.")))
	v31.send(AppendCommand(nil, "SUBSCRIBE", []byte("stream")))
	v31.send(AppendCommand(nil, "CANCEL", []byte("stream")))
	testutil.WaitFor(t, 5*time.Second, "the subscriptions", func() bool {
		b.door.mu.Lock()
		defer b.door.mu.Unlock()
		var sets []string
		for c := range b.door.conns {
			c.mu.Lock()
			var ts []string
			for tp, n := range c.subs {
				ts = append(ts, fmt.Sprintf("%q×%d", tp, n))
			}
			c.mu.Unlock()
			slices.Sort(ts)
			sets = append(sets, strings.Join(ts, " "))
		}
		slices.Sort(sets)
		return strings.Join(sets, "|") == `|""×1|"kernel."×1|"kernel.a"×1 "kernel.b"×1`
	})
	topics := []string{"kernel.a.status", "kernel.b.stream", "stream.stdout", "kernel.c.x"}
	for _, tp := range topics {
		testutil.NoErr(t, b.sock.SendMulti(zmq4.NewMsgFrom([]byte(tp), []byte("body"))))
	}
	got := readTopics
	if g := got(all, 4); strings.Join(g, ",") != strings.Join(topics, ",") {
		t.Errorf(`"" subscriber got %q`, g)
	}
	if g := got(kernel, 2); strings.Join(g, ",") != "kernel.a.status,kernel.b.stream" {
		t.Errorf("kernel.a/kernel.b subscriber got %q", g)
	}
	if g := got(v31, 3); strings.Join(g, ",") != "kernel.a.status,kernel.b.stream,kernel.c.x" {
		t.Errorf("3.1 subscriber got %q", g)
	}
	none.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if m, err := none.readMessage(false); err == nil {
		t.Errorf("a peer without subscriptions got %q", m)
	}
}

// pongingPeer keeps reading, answering PINGs as libzmq does, and sends
// what it reads (messages) to got.
func pongingPeer(p *rawPeer) chan [][]byte {
	got := make(chan [][]byte, 16)
	go func() {
		for {
			m, err := p.readMessage(true)
			if err != nil {
				close(got)
				return
			}
			got <- m
		}
	}()
	return got
}

// Two connections of one peer with one identity (two clients of one
// jupyter_client session) are both kept, each in a slot of its own: what
// one sends comes to zmq4 under its slot's identity, and the reply to it
// goes to that connection only. A client whose connection closes gets its
// slot back at once when it reconnects; a stdin door hands a message for a
// slot it lacks to the identity's lowest slot.
func TestDoorIdentities(t *testing.T) {
	b := bindDoor(t, "ROUTER", Limits{})
	first := dialRaw(t, b.addr)
	first.handshake("DEALER", []byte("session-1"))
	testutil.WaitFor(t, 5*time.Second, "the first client", func() bool { e, _ := b.door.Conns(); return e == 1 })
	second := dialRaw(t, b.addr)
	second.handshake("DEALER", []byte("session-1"))
	firstGot, secondGot := pongingPeer(first), pongingPeer(second)
	testutil.WaitFor(t, 5*time.Second, "both clients", func() bool { e, _ := b.door.Conns(); return e == 2 })

	// request sends payload from p and returns the identity zmq4 saw it
	// under, as the kernel would.
	request := func(p *rawPeer, payload string) string {
		t.Helper()
		testutil.NoErr(t, p.send(message([]byte(payload))))
		m, err := recvWithin(t, b.sock, 5*time.Second)
		if err != nil || len(m.Frames) != 2 || string(m.Frames[1]) != payload {
			t.Fatalf("the router got %v %v for %q", m.Frames, err, payload)
		}
		return string(m.Frames[0])
	}
	expect := func(got chan [][]byte, who, want string) {
		t.Helper()
		select {
		case m := <-got:
			if len(m) != 1 || string(m[0]) != want {
				t.Fatalf("%s got %q, want %q", who, m, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s got nothing; want %q", who, want)
		}
	}
	r1, r2 := request(first, "execute 1"), request(second, "execute 2")
	if r1 != "session-1" || r2 == r1 || claimedOf(r2) != "session-1" {
		t.Fatalf("routing identities %q and %q: want the claimed one and a slot of it", r1, r2)
	}
	// Replies in the other order, each to its own asker only.
	b.door.Send([][]byte{[]byte(r2), []byte("reply 2")})
	b.door.Send([][]byte{[]byte(r1), []byte("reply 1")})
	expect(secondGot, "the second client", "reply 2")
	expect(firstGot, "the first client", "reply 1")

	// The first client's connection drops; it reconnects at once and has
	// its identity, and its replies, back.
	first.c.Close()
	testutil.WaitFor(t, 5*time.Second, "the drop seen", func() bool { e, _ := b.door.Conns(); return e == 1 })
	back := dialRaw(t, b.addr)
	back.handshake("DEALER", []byte("session-1"))
	backGot := pongingPeer(back)
	if r := request(back, "execute 3"); r != "session-1" {
		t.Fatalf("the reconnected client routes as %q, want its identity back", r)
	}
	b.door.Send([][]byte{[]byte("session-1"), []byte("reply 3")})
	expect(backGot, "the reconnected client", "reply 3")
	b.door.Send([][]byte{[]byte(r2), []byte("reply 4")})
	expect(secondGot, "the second client", "reply 4")

	// A message for a slot this door lacks is dropped on shell, and on a
	// stdin door goes to the lowest slot (the same peer's).
	missing := slotID("session-1", 7)
	b.door.Send([][]byte{[]byte(missing), []byte("dropped")})
	b.door.RouteToAnySlot()
	b.door.Send([][]byte{[]byte(missing), []byte("input_request")})
	expect(backGot, "the lowest slot", "input_request")
	select {
	case m := <-secondGot:
		t.Fatalf("the second client got %q", m)
	default:
	}

	// Identities starting with a zero byte are libzmq's own: replaced, so
	// no client can claim a slot's.
	z1, z2, z3 := dialRaw(t, b.addr), dialRaw(t, b.addr), dialRaw(t, b.addr)
	z1.handshake("DEALER", []byte("\x00abcd"))
	z2.handshake("DEALER", []byte("\x00abcd"))
	z3.handshake("DEALER", []byte(r2))
	z3Got := pongingPeer(z3)
	if z1.closedWithin(300*time.Millisecond) || z2.closedWithin(300*time.Millisecond) {
		t.Fatal("a reserved identity was refused instead of replaced")
	}
	if r := request(z3, "execute 5"); r == r2 || claimedOf(r) != "" {
		t.Fatalf("a claim of slot identity %q routes as %q", r2, r)
	}
	b.door.Send([][]byte{[]byte(r2), []byte("reply 5")})
	expect(secondGot, "the second client", "reply 5")
	select {
	case m := <-z3Got:
		t.Fatalf("a claimer of a slot's identity got %q", m)
	case <-time.After(200 * time.Millisecond):
	}
}

// Connections past MaxConns are closed at once; past MaxHandshakes the
// oldest unfinished handshake makes room.
func TestDoorConnectionCaps(t *testing.T) {
	b := bindDoor(t, "ROUTER", Limits{MaxConns: 6, MaxHandshakes: 3})
	var peers []*rawPeer
	for i := range 4 {
		p := dialRaw(t, b.addr)
		p.handshake("DEALER", []byte(fmt.Sprintf("peer-%d", i)))
		peers = append(peers, p)
	}
	testutil.WaitFor(t, 5*time.Second, "four connections", func() bool { e, _ := b.door.Conns(); return e == 4 })
	s1, s2 := dialRaw(t, b.addr), dialRaw(t, b.addr) // silent: in handshake
	testutil.WaitFor(t, 5*time.Second, "two handshakes", func() bool { _, h := b.door.Conns(); return h == 2 })
	over := dialRaw(t, b.addr)
	if !over.closedWithin(2 * time.Second) {
		t.Fatal("a connection past MaxConns was kept")
	}
	peers[0].c.Close()
	testutil.WaitFor(t, 5*time.Second, "a free slot", func() bool { e, _ := b.door.Conns(); return e == 3 })
	s3 := dialRaw(t, b.addr) // 3 established + 3 in handshake: at both caps
	testutil.WaitFor(t, 5*time.Second, "three handshakes", func() bool { _, h := b.door.Conns(); return h == 3 })
	peers[1].c.Close()
	testutil.WaitFor(t, 5*time.Second, "another free slot", func() bool { e, _ := b.door.Conns(); return e == 2 })
	s4 := dialRaw(t, b.addr) // a fourth handshake: the oldest silent one goes
	if !s1.closedWithin(2 * time.Second) {
		t.Fatal("the oldest unfinished handshake was not closed to make room")
	}
	_, _, _ = s2, s3, s4
}

// Connections that come and go, honest or not, leave no goroutine,
// descriptor or byte behind.
func TestDoorChurnLeavesNothing(t *testing.T) {
	router := bindDoor(t, "ROUTER", Limits{})
	pub := bindDoor(t, "PUB", Limits{})
	roundTrip(t, router, "warm-up")
	// settle takes the figures once settled holds of them (goroutines of
	// closed connections ended), or, past a bound only a leak reaches, as
	// they are.
	settle := func(settled func(g, f int) bool) (g, f int) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			runtime.GC()
			g, f = runtime.NumGoroutine(), openFDs(t)
			if settled(g, f) || time.Now().After(deadline) {
				return g, f
			}
		}
	}
	// The baseline: the warm-up's figures the same twice, 100 ms apart.
	lastG, lastF := -1, -1
	g0, f0 := settle(func(g, f int) bool {
		same := g == lastG && f == lastF
		lastG, lastF = g, f
		if !same {
			time.Sleep(100 * time.Millisecond)
		}
		return same
	})
	for i := range 300 {
		switch i % 3 {
		case 0:
			roundTrip(t, router, fmt.Sprintf("c-%d", i))
		case 1:
			p := dialRaw(t, pub.addr)
			p.handshake("SUB", nil)
			p.send(message([]byte{1}))
			p.send(message([]byte("junk")))
			pub.sock.Send(zmq4.NewMsg([]byte("x")))
			p.c.Close()
		case 2:
			p := dialRaw(t, router.addr)
			p.send([]byte("GET / HTTP/1.0\r\n\r\n"))
			p.closedWithin(2 * time.Second)
			p.c.Close()
		}
	}
	testutil.WaitFor(t, 5*time.Second, "every connection to go", func() bool {
		e1, h1 := router.door.Conns()
		e2, h2 := pub.door.Conns()
		return e1+h1+e2+h2 == 0
	})
	g1, f1 := settle(func(g, f int) bool { return g <= g0+2 && f <= f0+2 })
	t.Logf("goroutines %d → %d, descriptors %d → %d", g0, g1, f0, f1)
	if g1 > g0+2 || f1 > f0+2 {
		t.Fatalf("300 connections left goroutines %d → %d, descriptors %d → %d", g0, g1, f0, f1)
	}
	// A connection leaves the door's map before its goroutine gives back
	// its share of the counters: wait for that too, with a bound only a
	// leak reaches (a loaded run read conns 1 in between).
	left := func() string {
		for _, b := range []*bound{router, pub} {
			if q, r, c := b.sh.queued.Load(), b.sh.receiving.Load(), b.sh.conns.Load(); q != 0 || r != 0 || c != 0 {
				return fmt.Sprintf("queued %d receiving %d conns %d", q, r, c)
			}
		}
		return ""
	}
	for deadline := time.Now().Add(5 * time.Second); left() != "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	if l := left(); l != "" {
		t.Fatalf("counters left: %s", l)
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// A declared size costs nothing until the bytes come: 200 connections
// each announcing a 900 MiB frame allocate nothing of it.
func TestDoorAllocatesOnlyWhatArrives(t *testing.T) {
	b := bindDoor(t, "ROUTER", Limits{})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var peers []*rawPeer
	for i := range 200 {
		p := dialRaw(t, b.addr)
		p.handshake("DEALER", []byte(fmt.Sprintf("big-%d", i)))
		p.send(append(binary.BigEndian.AppendUint64([]byte{FlagLong}, 900<<20), "only this"...))
		peers = append(peers, p)
	}
	testutil.WaitFor(t, 5*time.Second, "200 connections", func() bool { e, _ := b.door.Conns(); return e == 200 })
	// Every peer's header and first bytes are read: whatever a declared
	// size made the reader allocate is allocated now.
	testutil.WaitFor(t, 5*time.Second, "the first bytes of the 200 frames read", func() bool {
		return b.sh.receiving.Load() >= 200*int64(len("only this"))
	})
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapSys) - int64(before.HeapSys); grew > 256<<20 {
		t.Fatalf("heap grew by %d MiB for frames that never came", grew>>20)
	}
	roundTrip(t, b, "honest")
	// Nor when they go: a frame cut short must not reach zmq4's
	// allocation as it was declared (it once did, at close: 177 GB).
	for _, p := range peers {
		p.c.Close()
	}
	testutil.WaitFor(t, 5*time.Second, "the peers to go", func() bool { e, _ := b.door.Conns(); return e == 0 })
	var gone runtime.MemStats
	runtime.ReadMemStats(&gone)
	if grew := int64(gone.HeapSys) - int64(before.HeapSys); grew > 256<<20 {
		t.Fatalf("heap grew by %d MiB when 200 peers closed mid-frame", grew>>20)
	}
	t.Logf("heap: %d → %d MiB with the peers, %d MiB after they closed", before.HeapSys>>20, after.HeapSys>>20, gone.HeapSys>>20)
}

// failingListener fails every Accept with EMFILE, as a process at its
// descriptor limit sees, and counts the calls.
type failingListener struct {
	net.Listener
	calls atomic.Int64
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.calls.Add(1)
	return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

// An accept loop that keeps failing backs off instead of spinning (zmq4's
// own loop retries at once: 100 % CPU at the descriptor limit).
func TestDoorBacksOffOnAcceptErrors(t *testing.T) {
	real, err := net.Listen("tcp", "127.0.0.1:0")
	testutil.NoErr(t, err)
	fl := &failingListener{Listener: real}
	d := &Door{name: "t", socketType: "ROUTER", sh: NewShared(Limits{}, nil), ln: fl,
		done: make(chan struct{}), conns: map[*conn]struct{}{}, shaking: map[net.Conn]*shakeInfo{}, ids: map[string]*conn{}}
	go d.acceptLoop()
	// A window, not a wait for an event: the loop's calls in it are
	// counted; load can only make them fewer.
	time.Sleep(1500 * time.Millisecond)
	d.Close()
	// 5, 10, 20, … 640 ms, then 1 s: about 9 tries in 1.5 s.
	if n := fl.calls.Load(); n > 15 {
		t.Fatalf("%d accept calls in 1.5 s: the loop spins", n)
	} else {
		t.Logf("%d accept calls in 1.5 s", n)
	}
}

// A PUB door reports a topic when it gains its first subscriber among all
// connections, as an XPUB socket does upstream: not a second subscriber,
// not a cancel, and again once every subscriber of it has gone.
func TestDoorReportsFirstSubscribers(t *testing.T) {
	b := bindDoor(t, "PUB", Limits{})
	reported := make(chan string, 16)
	b.door.OnSubscribe(func(topic []byte) { reported <- string(topic) })
	next := func(want string) {
		t.Helper()
		select {
		case got := <-reported:
			if got != want {
				t.Fatalf("reported %q, want %q", got, want)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%q not reported", want)
		}
	}
	quiet := func() {
		t.Helper()
		select {
		case got := <-reported:
			t.Fatalf("reported %q, want nothing", got)
		case <-time.After(200 * time.Millisecond):
		}
	}
	a := dialRaw(t, b.addr)
	a.handshake("SUB", nil)
	a.send(message([]byte("\x01")))
	next("")
	a.send(message([]byte("\x01kernel.")))
	next("kernel.")
	a.send(message([]byte("\x01kernel."))) // the same connection again: counted, not reported
	quiet()
	c := dialRaw(t, b.addr)
	c.handshake("SUB", nil)
	c.send(AppendCommand(nil, "SUBSCRIBE", []byte("kernel."))) // another connection, same topic
	quiet()
	c.send(AppendCommand(nil, "SUBSCRIBE", []byte("kernel.x")))
	next("kernel.x")
	if got := b.door.Topics(); len(got) != 3 {
		t.Fatalf("Topics() = %q", got)
	}
	c.c.Close() // its kernel.x goes with it; kernel. is still a's
	testutil.WaitFor(t, 5*time.Second, "kernel.x to go", func() bool { return len(b.door.Topics()) == 2 })
	d := dialRaw(t, b.addr)
	d.handshake("SUB", nil)
	d.send(message([]byte("\x01kernel.x")))
	next("kernel.x")
}

// A client that connects and closes at once (Jupyter's server does, when a
// notebook opens) is not a warning; a peer that breaks the handshake is.
func TestDoorHandshakeLogLevels(t *testing.T) {
	var log testutil.Buffer
	sh := NewShared(Limits{}, slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	d := bindWith(t, "ROUTER", "shell", sh, false).door
	// The connect-and-close handshakes run here, not on the door's accept
	// loop: each has logged what it logs once handshake returns.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testutil.NoErr(t, err)
	defer ln.Close()
	for _, half := range [][]byte{nil, AppendGreeting(nil, false)[:20]} {
		c, err := net.Dial("tcp", ln.Addr().String())
		testutil.NoErr(t, err)
		c.Write(half)
		c.Close()
		nc, err := ln.Accept()
		testutil.NoErr(t, err)
		p := peerOf(nc)
		if why := d.admit(nc, p); why != "" {
			t.Fatalf("admit: %s", why)
		}
		d.handshake(nc, p)
	}
	if e, h := d.Conns(); e != 0 || h != 0 {
		t.Fatalf("Conns() = %d, %d after the closed handshakes", e, h)
	}
	text := log.String()
	if strings.Contains(text, "handshake failed") {
		t.Fatalf("a connect-and-close was logged as a warning:\n%s", text)
	}
	if n := strings.Count(text, `level=DEBUG msg="zmtp: a connection closed during its handshake"`); n != 1 {
		t.Fatalf("%d debug lines for the half greeting, want 1:\n%s", n, text)
	}
	// The warning is logged at all: an HTTP request on a ZMTP port.
	bad := dialRaw(t, d.Addr().String())
	bad.send([]byte("GET / HTTP/1.1\r\n\r\n"))
	if !bad.closedWithin(5 * time.Second) {
		t.Fatal("an HTTP request on a ZMTP port was kept")
	}
	testutil.WaitFor(t, 5*time.Second, "the warning", func() bool { return strings.Contains(log.String(), "handshake failed") })
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "handshake failed") && (!strings.Contains(line, "level=WARN") || !strings.Contains(line, "no ZMTP signature")) {
			t.Fatalf("the HTTP request's warning is not one:\n%s", log.String())
		}
	}
}

// A PUB door replays what it published since its bind, within ReplayFor
// and up to QueueLimit bytes, to each connection's first subscription,
// before anything published later, and only what that subscription
// matches; a connection subscribed all along gets nothing twice, nor does
// one that subscribes again; past the window nothing is replayed. It is
// what a client kept across a restart needs: its SUB comes back after the
// spare kernel already published the cell's output.
func TestDoorReplaysToFirstSubscriptions(t *testing.T) {
	b := bindDoor(t, "PUB", Limits{QueueLimit: 64})
	send := func(topics ...string) {
		t.Helper()
		for _, tp := range topics {
			testutil.NoErr(t, b.door.Send([][]byte{[]byte(tp), []byte("0123456789")}))
		}
	}
	subscribe := func(topic string) *rawPeer {
		p := dialRaw(t, b.addr)
		p.handshake("SUB", nil)
		p.send(AppendCommand(nil, "SUBSCRIBE", []byte(topic)))
		return p
	}
	got := readTopics
	subscribed := func(n int) {
		t.Helper()
		testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("%d subscribed connections", n), func() bool {
			b.door.mu.Lock()
			defer b.door.mu.Unlock()
			k := 0
			for c := range b.door.conns {
				c.mu.Lock()
				if len(c.subs) > 0 {
					k++
				}
				c.mu.Unlock()
			}
			return k == n
		})
	}

	early := subscribe("")
	subscribed(1)
	send("a.status", "a.stream", "b.status") // 3 × 18 bytes: the 4th would pass QueueLimit
	send("a.late")                           // live only: past the bytes kept
	late := subscribe("a.")
	subscribed(2)
	send("a.after")
	if g := strings.Join(got(late, 3), ","); g != "a.status,a.stream,a.after" {
		t.Errorf("a first subscription within the window got %q; want what it matches of the kept, then the live", g)
	}
	if g := strings.Join(got(early, 5), ","); g != "a.status,a.stream,b.status,a.late,a.after" {
		t.Errorf("the subscriber of all along got %q; want each message once", g)
	}
	// Subscribing again replays nothing.
	late.send(AppendCommand(nil, "CANCEL", []byte("a.")))
	subscribed(1)
	late.send(AppendCommand(nil, "SUBSCRIBE", []byte("")))
	subscribed(2)
	send("c.last")
	if g := strings.Join(got(late, 1), ","); g != "c.last" {
		t.Errorf("a second subscription got %q; want only what came after it", g)
	}
	// Past the window: nothing is kept or replayed.
	noReplay(b)
	send("d.gone")
	after := subscribe("")
	subscribed(3)
	send("d.live")
	if g := strings.Join(got(after, 1), ","); g != "d.live" {
		t.Errorf("a subscription past the window got %q; want the live message only", g)
	}
}
