package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"golang.org/x/crypto/nacl/box"
)

// curveClient is the client side of CurveZMQ (RFC 26) as libzmq speaks it
// (curve_client_tools.hpp, curve_mechanism_base.cpp), written for these
// tests from the RFC: what pyzmq sends with curve_serverkey set. It is
// the crypto only; curvePeer puts it on a connection.
type curveClient struct {
	server       [32]byte // S: the server's long-term public key
	pub, sec     [32]byte // C: ours, long-term
	cnPub, cnSec [32]byte // C': ours, this connection only
	serverCn     [32]byte // S': the server's, from WELCOME
	shared       [32]byte // box key of S' and c'
	cookie       []byte   // from WELCOME, echoed in INITIATE
	nonce        uint64   // our last short nonce
	peerNonce    uint64   // the server's last short nonce
	rnd          io.Reader

	// Tampering, for the tests of the server's checks.
	version     [2]byte   // HELLO's version; {1, 0} by default
	helloSig    []byte    // HELLO's signature box content; 64 zero bytes by default
	vouchServer *[32]byte // vouch for this server key instead of server
	vouchCn     *[32]byte // vouch for this transient key instead of C'
	vouchSec    *[32]byte // sign the vouch with this secret instead of c
}

func newCurveClient(server [32]byte, rnd io.Reader) *curveClient {
	c := &curveClient{server: server, rnd: rnd, version: [2]byte{1, 0}}
	pub, sec, err := box.GenerateKey(rnd)
	if err != nil {
		panic(err)
	}
	c.pub, c.sec = *pub, *sec
	if pub, sec, err = box.GenerateKey(rnd); err != nil {
		panic(err)
	}
	c.cnPub, c.cnSec = *pub, *sec
	return c
}

// curveNonce is a 24-byte box nonce: a 16- or 8-byte prefix and the rest.
func curveNonce(prefix string, rest []byte) *[24]byte {
	var n [24]byte
	if len(prefix)+len(rest) != 24 {
		panic(fmt.Sprintf("nonce of %d+%d bytes", len(prefix), len(rest)))
	}
	copy(n[:], prefix)
	copy(n[len(prefix):], rest)
	return &n
}

func (c *curveClient) nextShort() []byte {
	c.nonce++
	return binary.BigEndian.AppendUint64(nil, c.nonce)
}

// hello returns the HELLO command body (200 bytes).
func (c *curveClient) hello() []byte {
	sig := c.helloSig
	if sig == nil {
		sig = make([]byte, 64)
	}
	short := c.nextShort()
	b := append([]byte("\x05HELLO"), c.version[:]...)
	b = append(b, make([]byte, 72)...)
	b = append(b, c.cnPub[:]...)
	b = append(b, short...)
	return box.Seal(b, sig, curveNonce("CurveZMQHELLO---", short), &c.server, &c.cnSec)
}

// welcome takes the WELCOME command body: S' and the cookie.
func (c *curveClient) welcome(body []byte) error {
	if len(body) != 168 || !bytes.HasPrefix(body, []byte("\x07WELCOME")) {
		return fmt.Errorf("not a WELCOME: %d bytes %q", len(body), body[:min(len(body), 8)])
	}
	plain, ok := box.Open(nil, body[24:], curveNonce("WELCOME-", body[8:24]), &c.server, &c.cnSec)
	if !ok || len(plain) != 32+96 {
		return errors.New("WELCOME does not open")
	}
	copy(c.serverCn[:], plain[:32])
	c.cookie = plain[32:]
	box.Precompute(&c.shared, &c.serverCn, &c.cnSec)
	return nil
}

// initiate returns the INITIATE command body carrying metadata.
func (c *curveClient) initiate(metadata []byte) []byte {
	vn := make([]byte, 16)
	if _, err := io.ReadFull(c.rnd, vn); err != nil {
		panic(err)
	}
	cn, srv, sec := c.cnPub, c.server, c.sec
	if c.vouchCn != nil {
		cn = *c.vouchCn
	}
	if c.vouchServer != nil {
		srv = *c.vouchServer
	}
	if c.vouchSec != nil {
		sec = *c.vouchSec
	}
	vouch := box.Seal(nil, append(cn[:], srv[:]...), curveNonce("VOUCH---", vn), &c.serverCn, &sec)
	plain := append(append(append(c.pub[:], vn...), vouch...), metadata...)
	short := c.nextShort()
	b := append(append([]byte("\x08INITIATE"), c.cookie...), short...)
	return box.SealAfterPrecomputation(b, plain, curveNonce("CurveZMQINITIATE", short), &c.shared)
}

// ready takes the READY command body and returns the server's metadata.
func (c *curveClient) ready(body []byte) ([]Property, error) {
	if len(body) < 14+box.Overhead || !bytes.HasPrefix(body, []byte("\x05READY")) {
		return nil, fmt.Errorf("not a READY: %d bytes %q", len(body), body[:min(len(body), 6)])
	}
	if err := c.peerShort(body[6:14]); err != nil {
		return nil, err
	}
	meta, ok := box.OpenAfterPrecomputation(nil, body[14:], curveNonce("CurveZMQREADY---", body[6:14]), &c.shared)
	if !ok {
		return nil, errors.New("READY does not open")
	}
	return ParseMetadata(meta)
}

func (c *curveClient) peerShort(b []byte) error {
	n := binary.BigEndian.Uint64(b)
	if n <= c.peerNonce {
		return fmt.Errorf("server nonce %d after %d", n, c.peerNonce)
	}
	c.peerNonce = n
	return nil
}

// sealWith returns a whole MESSAGE frame (header included) with short
// nonce n, carrying one frame: its inner flags byte and body.
func (c *curveClient) sealWith(n uint64, flags byte, body []byte) []byte {
	short := binary.BigEndian.AppendUint64(nil, n)
	inner := append([]byte{flags}, body...)
	out := AppendFrameHeader(nil, 0, 16+box.Overhead+len(inner))
	out = append(out, "\x07MESSAGE"...)
	out = append(out, short...)
	return box.SealAfterPrecomputation(out, inner, curveNonce("CurveZMQMESSAGEC", short), &c.shared)
}

// seal is sealWith our next nonce.
func (c *curveClient) seal(flags byte, body []byte) []byte {
	c.nonce++
	return c.sealWith(c.nonce, flags, body)
}

// sealMessage seals the frames of one message, MORE on all but the last.
func (c *curveClient) sealMessage(frames ...[]byte) []byte {
	var out []byte
	for i, f := range frames {
		var flags byte = boxMore
		if i == len(frames)-1 {
			flags = 0
		}
		out = append(out, c.seal(flags, f)...)
	}
	return out
}

// sealCommand seals a ZMTP command (inner COMMAND flag).
func (c *curveClient) sealCommand(name string, data []byte) []byte {
	return c.seal(boxCommand, append(append([]byte{byte(len(name))}, name...), data...))
}

// open opens the body of a MESSAGE frame from the server: the inner
// flags byte and the frame it carries.
func (c *curveClient) open(body []byte) (byte, []byte, error) {
	if len(body) < 16+box.Overhead+1 || !bytes.HasPrefix(body, []byte("\x07MESSAGE")) {
		return 0, nil, fmt.Errorf("not a MESSAGE: %d bytes %q", len(body), body[:min(len(body), 8)])
	}
	if err := c.peerShort(body[8:16]); err != nil {
		return 0, nil, err
	}
	plain, ok := box.OpenAfterPrecomputation(nil, body[16:], curveNonce("CurveZMQMESSAGES", body[8:16]), &c.shared)
	if !ok || len(plain) == 0 {
		return 0, nil, errors.New("MESSAGE does not open")
	}
	return plain[0], plain[1:], nil
}

// curvePeer is a curveClient on a connection to a door.
type curvePeer struct {
	*rawPeer
	cc *curveClient
}

// dialCurve connects a CURVE client that knows server as the server's key
// (it may be another than the door's). The connection is closed at tb's
// end.
func dialCurve(tb testing.TB, addr string, server [32]byte) *curvePeer {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	testutil.NoErr(tb, err)
	tb.Cleanup(func() { c.Close() })
	p := &rawPeer{c: c, r: bufio.NewReader(c)}
	if t, ok := tb.(*testing.T); ok {
		p.t = t
	}
	return &curvePeer{rawPeer: p, cc: newCurveClient(server, rand.Reader)}
}

func commandFrame(body []byte) []byte {
	return append(AppendFrameHeader(nil, FlagCommand, len(body)), body...)
}

// greet sends a CURVE client greeting and checks the door's.
func (p *curvePeer) greet() error {
	if err := p.send(AppendGreetingMech(nil, MechCurve, false)); err != nil {
		return err
	}
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer p.c.SetReadDeadline(time.Time{})
	g := make([]byte, GreetingLen)
	if _, err := io.ReadFull(p.r, g); err != nil {
		return fmt.Errorf("no greeting from the door: %w", err)
	}
	pg, err := ParseGreeting(g)
	if err != nil {
		return err
	}
	if pg.Mechanism != MechCurve || !pg.AsServer || pg.Major != 3 || pg.Minor != 0 {
		return fmt.Errorf("door greeting %+v, want CURVE as server, ZMTP 3.0", pg)
	}
	return nil
}

// readCommand reads one command frame within 5 s.
func (p *curvePeer) readCommand(what string) ([]byte, error) {
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer p.c.SetReadDeadline(time.Time{})
	h, body, err := p.readFrame()
	if err != nil {
		return nil, fmt.Errorf("no %s: %w", what, err)
	}
	if !h.Command() || h.More() {
		return nil, fmt.Errorf("%s in a frame with flags %#x", what, h.Flags)
	}
	return body, nil
}

// sendHello sends HELLO and reads WELCOME.
func (p *curvePeer) sendHello() error {
	if err := p.send(commandFrame(p.cc.hello())); err != nil {
		return err
	}
	body, err := p.readCommand("WELCOME")
	if err != nil {
		return err
	}
	return p.cc.welcome(body)
}

func readyMetadata(socketType string, identity []byte) []byte {
	meta := AppendProperty(nil, "Socket-Type", []byte(socketType))
	if identity != nil {
		meta = AppendProperty(meta, "Identity", identity)
	}
	return meta
}

// sendInitiate sends INITIATE with metadata and reads READY, checking the
// socket type it names.
func (p *curvePeer) sendInitiate(metadata []byte, wantType string) error {
	if err := p.send(commandFrame(p.cc.initiate(metadata))); err != nil {
		return err
	}
	body, err := p.readCommand("READY")
	if err != nil {
		return err
	}
	props, err := p.cc.ready(body)
	if err != nil {
		return err
	}
	for _, pr := range props {
		if pr.Name == "Socket-Type" && string(pr.Value) == wantType {
			return nil
		}
	}
	return fmt.Errorf("READY metadata %q, want Socket-Type %s", props, wantType)
}

// handshake does the whole CURVE handshake as a socketType client of a
// door of type doorType.
func (p *curvePeer) handshake(socketType string, identity []byte) error {
	doorType := "ROUTER"
	if socketType == "SUB" || socketType == "XSUB" {
		doorType = "PUB"
	}
	if err := p.greet(); err != nil {
		return err
	}
	if err := p.sendHello(); err != nil {
		return err
	}
	return p.sendInitiate(readyMetadata(socketType, identity), doorType)
}

func (p *curvePeer) mustHandshake(tb testing.TB, socketType string, identity []byte) {
	tb.Helper()
	if err := p.handshake(socketType, identity); err != nil {
		tb.Fatalf("CURVE handshake: %v", err)
	}
}

// sendMsg seals and sends one message.
func (p *curvePeer) sendMsg(frames ...[]byte) error { return p.send(p.cc.sealMessage(frames...)) }

// recv reads and opens one MESSAGE frame: every frame from a CURVE door
// is a data frame without flags of its own.
func (p *curvePeer) recv() (byte, []byte, error) {
	h, body, err := p.readFrame()
	if err != nil {
		return 0, nil, err
	}
	if h.Flags&^FlagLong != 0 {
		return 0, nil, fmt.Errorf("MESSAGE in a frame with flags %#x", h.Flags)
	}
	return p.cc.open(body)
}

// recvMessage reads the next message, answering PINGs when pong is set
// and skipping other commands.
func (p *curvePeer) recvMessage(pong bool) ([][]byte, error) {
	var frames [][]byte
	for {
		flags, body, err := p.recv()
		if err != nil {
			return nil, err
		}
		if flags&^(boxMore|boxCommand) != 0 {
			return nil, fmt.Errorf("inner flags %#x", flags)
		}
		if flags&boxCommand != 0 {
			if flags&boxMore != 0 || len(frames) > 0 {
				return nil, fmt.Errorf("command (flags %#x) inside a message", flags)
			}
			name, data, err := ParseCommand(body)
			if err != nil {
				return nil, err
			}
			if name == "PING" && pong {
				ping, err := ParsePing(data)
				if err != nil {
					return nil, err
				}
				if err := p.send(p.cc.sealCommand("PONG", ping.Context)); err != nil {
					return nil, err
				}
			}
			continue
		}
		frames = append(frames, body)
		if flags&boxMore == 0 {
			return frames, nil
		}
	}
}

func (p *curvePeer) recvMessageWithin(d time.Duration) ([][]byte, error) {
	p.c.SetReadDeadline(time.Now().Add(d))
	defer p.c.SetReadDeadline(time.Time{})
	return p.recvMessage(false)
}

// brief is a message for a test's failure line: sizes, and the start of
// each frame.
func brief(frames [][]byte) string {
	var b strings.Builder
	b.WriteString("[")
	for i, f := range frames {
		if i > 0 {
			b.WriteString(" ")
		}
		if len(f) > 40 {
			fmt.Fprintf(&b, "%q…(%d bytes)", f[:40], len(f))
		} else {
			fmt.Fprintf(&b, "%q", f)
		}
	}
	return b.String() + "]"
}

func newCurveKeys(tb testing.TB) *CurveKeys {
	tb.Helper()
	pub, sec, err := box.GenerateKey(rand.Reader)
	testutil.NoErr(tb, err)
	return &CurveKeys{Public: *pub, Secret: *sec}
}

// bindCurveDoor is bindDoor with CURVE (keys nil: NULL).
func bindCurveDoor(tb testing.TB, socketType string, lim Limits, keys *CurveKeys) *bound {
	tb.Helper()
	sh := NewShared(lim, nil)
	sh.UseCurve(keys)
	return bindWith(tb, socketType, strings.ToLower(socketType), sh, false)
}

// recvMatching receives from a zmq4 socket until a message that match
// accepts, skipping the others, for at most d.
func recvMatching(s interface{ Recv() (zmq4.Msg, error) }, d time.Duration, match func(zmq4.Msg) bool) (zmq4.Msg, error) {
	ch := make(chan zmq4.Msg, 1)
	errc := make(chan error, 1)
	go func() { // ends with the socket, if not before
		for {
			m, err := s.Recv()
			if err != nil {
				errc <- err
				return
			}
			if match(m) {
				ch <- m
				return
			}
		}
	}()
	select {
	case m := <-ch:
		return m, nil
	case err := <-errc:
		return zmq4.Msg{}, err
	case <-time.After(d):
		return zmq4.Msg{}, errors.New("timeout")
	}
}

// curveRoundTrip checks that an established CURVE client p with routing
// identity id can talk to the ROUTER behind b both ways; strict: the next
// message the ROUTER gets must be p's.
func curveRoundTrip(t testing.TB, b *bound, p *curvePeer, id string) {
	t.Helper()
	roundTripCurve(t, b, p, id, true)
}

func roundTripCurve(t testing.TB, b *bound, p *curvePeer, id string, strict bool) {
	t.Helper()
	token := fmt.Sprintf("ping from %s at %d", id, time.Now().UnixNano())
	testutil.NoErr(t, p.sendMsg([]byte("hello"), []byte(token)))
	m, err := recvMatching(b.sock, 5*time.Second, func(m zmq4.Msg) bool {
		return strict || len(m.Frames) == 3 && string(m.Frames[0]) == id && string(m.Frames[2]) == token
	})
	if err != nil {
		t.Fatalf("router got nothing from %s: %v", id, err)
	}
	if len(m.Frames) != 3 || string(m.Frames[0]) != id || string(m.Frames[1]) != "hello" || string(m.Frames[2]) != token {
		t.Fatalf("router got %s, want [%q hello %q]", brief(m.Frames), id, token)
	}
	testutil.NoErr(t, b.sock.SendMulti(zmq4.NewMsgFrom([]byte(id), []byte("reply"), []byte(token))))
	r, err := p.recvMessageWithin(5 * time.Second)
	if err != nil || len(r) != 2 || string(r[0]) != "reply" || string(r[1]) != token {
		t.Fatalf("%s got %s %v", id, brief(r), err)
	}
}

// newCurveRouter is a CURVE ROUTER door with one established client
// (routing identity "bystander") that the tests check keeps working.
func newCurveRouter(t *testing.T, lim Limits) (*bound, *CurveKeys, *curvePeer) {
	keys := newCurveKeys(t)
	b := bindCurveDoor(t, "ROUTER", lim, keys)
	by := dialCurve(t, b.addr, keys.Public)
	by.mustHandshake(t, "DEALER", []byte("bystander"))
	curveRoundTrip(t, b, by, "bystander")
	return b, keys, by
}

// waitConns waits until the door has established connections and none
// in handshake, and no inbound bytes held.
func waitConns(t testing.TB, b *bound, established int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e, h := b.door.Conns()
		if e == established && h == 0 && b.sh.conns.Load() == int64(established) && b.sh.receiving.Load() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("door: %d established, %d in handshake, %d counted, %d bytes receiving; want %d established",
				e, h, b.sh.conns.Load(), b.sh.receiving.Load(), established)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestZ85(t *testing.T) {
	// RFC 32's test vector.
	vec := []byte{0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B}
	if got := Z85Encode(vec); got != "HelloWorld" {
		t.Fatalf("Z85Encode = %q, want HelloWorld", got)
	}
	if got, err := Z85Decode("HelloWorld"); err != nil || !bytes.Equal(got, vec) {
		t.Fatalf("Z85Decode(HelloWorld) = % x, %v", got, err)
	}
	if got, err := Z85Decode(""); err != nil || len(got) != 0 {
		t.Fatalf("Z85Decode(\"\") = % x, %v", got, err)
	}
	// The extremes of a group.
	for _, b := range [][]byte{{0, 0, 0, 0}, {0xFF, 0xFF, 0xFF, 0xFF}} {
		s := Z85Encode(b)
		if got, err := Z85Decode(s); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("% x → %q → % x, %v", b, s, got, err)
		}
	}
	for range 100 {
		k := make([]byte, 32)
		rand.Read(k)
		s := Z85Encode(k)
		if len(s) != 40 || strings.ContainsFunc(s, func(r rune) bool { return !strings.ContainsRune(z85Alphabet, r) }) {
			t.Fatalf("Z85Encode of a key: %q", s)
		}
		if got, err := Z85Decode(s); err != nil || !bytes.Equal(got, k) {
			t.Fatalf("round trip of % x: %q → % x, %v", k, s, got, err)
		}
	}
	for _, tc := range []struct{ name, in, want string }{
		{"length not a multiple of 5", "HelloWorl", "multiple of 5"},
		{"one character", "H", "multiple of 5"},
		{"space", "Hello World", "multiple of 5"},
		{"character outside the alphabet", "Hello,orld", "character 6 is not in the alphabet"},
		{"quote", "\"ello", "character 1 is not in the alphabet"},
		{"high byte", "Hell\xff", "character 5 is not in the alphabet"},
		{"NUL", "Hello\x00orl", "multiple of 5"},
		{"NUL in a group", "Hello\x00orld", "character 6 is not in the alphabet"},
		{"overflowing group", "%%%%%", "overflow"},
		{"overflowing second group", "Hello%%%%%", "characters 6-10 overflow"},
		{"just over 2^32", "%nSc1", "overflow"}, // 84·85⁴+… = 2^32
	} {
		got, err := Z85Decode(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Z85Decode(%q) = % x, %v; want an error with %q", tc.name, tc.in, got, err, tc.want)
		}
	}
	// The largest group that fits.
	if got, err := Z85Decode("%nSc0"); err != nil || !bytes.Equal(got, []byte{0xFF, 0xFF, 0xFF, 0xFF}) {
		t.Fatalf("Z85Decode(%%nSc0) = % x, %v", got, err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Z85Encode of 3 bytes did not panic")
			}
		}()
		Z85Encode([]byte{1, 2, 3})
	}()
}

func TestParseCurveKeys(t *testing.T) {
	pub, sec, err := box.GenerateKey(rand.Reader)
	testutil.NoErr(t, err)
	pubText, secText := Z85Encode(pub[:]), Z85Encode(sec[:])
	k, err := ParseCurveKeys(pubText, secText)
	if err != nil {
		t.Fatalf("a generated pair: %v", err)
	}
	if k.Public != *pub || k.Secret != *sec {
		t.Fatal("the parsed keys differ from the generated ones")
	}
	other, otherSec, _ := box.GenerateKey(rand.Reader)
	otherText := Z85Encode(other[:])
	bad := []byte(secText)
	bad[17] = ' '
	for _, tc := range []struct{ name, pub, sec, want string }{
		{"mismatched pair", otherText, secText, "not the secret key's"},
		{"pair swapped", secText, pubText, "not the secret key's"},
		{"another pair's secret", pubText, Z85Encode(otherSec[:]), "not the secret key's"},
		{"public of 39", pubText[:39], secText, "public key of 39 characters"},
		{"secret of 41", pubText, secText + "0", "secret key of 41 characters"},
		{"secret empty", pubText, "", "secret key of 0 characters"},
		{"secret not Z85", pubText, string(bad), "character 18 is not in the alphabet"},
		{"public overflows", "%%%%%" + pubText[5:], secText, "characters 1-5 overflow"},
	} {
		k, err := ParseCurveKeys(tc.pub, tc.sec)
		if err == nil {
			t.Errorf("%s: accepted (%v)", tc.name, k != nil)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
		// The error goes to logs: no piece of either key's text.
		for _, text := range []string{tc.pub, tc.sec, pubText, secText} {
			for i := 0; i+8 <= len(text); i++ {
				if strings.Contains(err.Error(), text[i:i+8]) {
					t.Errorf("%s: the error %q holds key text %q", tc.name, err, text[i:i+8])
					break
				}
			}
		}
	}
	// The hex-encoded public key case must not be mistaken for Z85: it is
	// 40 characters, all in the alphabet, and decodes; only the pair check
	// refuses it.
	if _, err := ParseCurveKeys(fmt.Sprintf("%x", pub[:20]), secText); err == nil || !strings.Contains(err.Error(), "not the secret key's") {
		t.Errorf("hex public key: %v", err)
	}
}

// A CURVE client talks to a zmq4 ROUTER through the door both ways, with
// the frames and MORE flags of each message intact, large frames too.
func TestCurveDoorRelays(t *testing.T) {
	keys := newCurveKeys(t)
	b := bindCurveDoor(t, "ROUTER", Limits{}, keys)
	p := dialCurve(t, b.addr, keys.Public)
	p.mustHandshake(t, "DEALER", []byte("curve-1"))
	testutil.NoErr(t, p.sendMsg([]byte("first"), []byte("second")))
	m, err := recvWithin(t, b.sock, 5*time.Second)
	if err != nil || len(m.Frames) != 3 || string(m.Frames[0]) != "curve-1" || string(m.Frames[1]) != "first" || string(m.Frames[2]) != "second" {
		t.Fatalf("router got %s %v", brief(m.Frames), err)
	}
	testutil.NoErr(t, b.sock.SendMulti(zmq4.NewMsgFrom([]byte("curve-1"), []byte("r1"), nil, []byte("r3"))))
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i, want := range []struct {
		flags byte
		body  string
	}{{boxMore, "r1"}, {boxMore, ""}, {0, "r3"}} {
		flags, body, err := p.recv()
		if err != nil || flags != want.flags || string(body) != want.body {
			t.Fatalf("reply frame %d: flags %#x %q %v; want %#x %q", i, flags, body, err, want.flags, want.body)
		}
	}

	// 1 MiB, more than stageAbove, both ways.
	big := make([]byte, 1<<20)
	rand.Read(big)
	testutil.NoErr(t, p.sendMsg([]byte("big"), big, []byte("tail")))
	m, err = recvWithin(t, b.sock, 10*time.Second)
	if err != nil || len(m.Frames) != 4 || string(m.Frames[1]) != "big" || !bytes.Equal(m.Frames[2], big) || string(m.Frames[3]) != "tail" {
		t.Fatalf("router got %d frames, %v", len(m.Frames), err)
	}
	bigBack := bytes.Clone(big)
	bigBack[0] ^= 0xFF
	testutil.NoErr(t, b.sock.SendMulti(zmq4.NewMsgFrom([]byte("curve-1"), bigBack, []byte("after"))))
	r, err := p.recvMessageWithin(10 * time.Second)
	if err != nil || len(r) != 2 || !bytes.Equal(r[0], bigBack) || string(r[1]) != "after" {
		t.Fatalf("client got %d frames, %v", len(r), err)
	}

	// Many messages of mixed sizes, both ways at once, in order; every
	// frame the client gets is a MESSAGE whose nonce grew (recv checks).
	// The door's side writes while the client is busy sending, so the
	// sealed frames queue up behind each other.
	const n = 200
	sent := make([][]byte, n)
	for i := range sent {
		sent[i] = make([]byte, (i*7919)%(150<<10))
		rand.Read(sent[i])
	}
	routerDone := make(chan error, 1)
	go func() {
		for i := range n {
			if err := b.sock.SendMulti(zmq4.NewMsgFrom([]byte("curve-1"), []byte(fmt.Sprint(i)), sent[i])); err != nil {
				routerDone <- err
				return
			}
			m, err := b.sock.Recv()
			if err != nil || len(m.Frames) != 3 || string(m.Frames[1]) != fmt.Sprint(i) || !bytes.Equal(m.Frames[2], sent[i]) {
				routerDone <- fmt.Errorf("router message %d: %d frames, %v", i, len(m.Frames), err)
				return
			}
		}
		routerDone <- nil
	}()
	clientDone := make(chan error, 1)
	go func() {
		for i := range n {
			r, err := p.recvMessageWithin(10 * time.Second)
			if err != nil || len(r) != 2 || string(r[0]) != fmt.Sprint(i) || !bytes.Equal(r[1], sent[i]) {
				clientDone <- fmt.Errorf("client message %d: %d frames, %v", i, len(r), err)
				return
			}
		}
		clientDone <- nil
	}()
	for i := range n {
		testutil.NoErr(t, p.sendMsg([]byte(fmt.Sprint(i)), sent[i]))
	}
	for _, ch := range []chan error{routerDone, clientDone} {
		select {
		case err := <-ch:
			testutil.NoErr(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("the exchange did not finish")
		}
	}
	p.c.Close()
	waitConns(t, b, 0)
}

// A door speaks one mechanism: a NULL client is refused by a CURVE door,
// a CURVE client by a NULL door.
func TestCurveDoorRefusesOtherMechanism(t *testing.T) {
	keys := newCurveKeys(t)
	curve := bindCurveDoor(t, "ROUTER", Limits{}, keys)
	null := bindDoor(t, "ROUTER", Limits{})

	p := dialRaw(t, curve.addr)
	p.send(AppendReady(AppendGreeting(nil, false), "DEALER", []byte("plain")))
	if !p.closedWithin(3 * time.Second) {
		t.Fatal("the CURVE door kept a NULL client")
	}
	// zmq4's own DEALER (NULL) gets nowhere either: its handshake fails.
	zc := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity("zmq4")))
	t.Cleanup(func() { zc.Close() })
	if err := zc.Dial("tcp://" + curve.addr); err == nil {
		t.Fatal("a NULL zmq4 DEALER completed a handshake with the CURVE door")
	}

	c := dialCurve(t, null.addr, keys.Public)
	if err := c.handshake("DEALER", []byte("curvy")); err == nil {
		t.Fatal("a NULL door completed a CURVE handshake")
	}
	if !c.closedWithin(3 * time.Second) {
		t.Fatal("the NULL door kept a CURVE client")
	}
	waitConns(t, null, 0)
	roundTrip(t, null, "after")
	good := dialCurve(t, curve.addr, keys.Public)
	good.mustHandshake(t, "DEALER", []byte("good"))
	curveRoundTrip(t, curve, good, "good")
}

// A handshake that breaks a rule of RFC 26 costs that connection only.
func TestCurveDoorRefusesBadHandshakes(t *testing.T) {
	b, keys, by := newCurveRouter(t, Limits{})
	otherPub, otherSec, _ := box.GenerateKey(rand.Reader)
	for _, tc := range []struct {
		name string
		// run drives the handshake; an error means the door refused
		// where the test client could tell.
		run func(p *curvePeer) error
	}{
		{"wrong server key", func(p *curvePeer) error {
			p.cc.server = *otherPub
			return p.handshake("DEALER", nil)
		}},
		{"client greeting as server", func(p *curvePeer) error {
			g := AppendGreetingMech(nil, MechCurve, true)
			p.send(append(g, commandFrame(p.cc.hello())...))
			p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(p.r, make([]byte, GreetingLen)); err != nil {
				return err
			}
			_, err := p.readCommand("WELCOME")
			return err
		}},
		{"HELLO version 2.0", func(p *curvePeer) error {
			p.cc.version = [2]byte{2, 0}
			return p.handshake("DEALER", nil)
		}},
		{"HELLO signature not zero", func(p *curvePeer) error {
			p.cc.helloSig = bytes.Repeat([]byte{1}, 64)
			return p.handshake("DEALER", nil)
		}},
		{"HELLO as a message frame", func(p *curvePeer) error {
			p.greet()
			h := p.cc.hello()
			p.send(append(AppendFrameHeader(nil, 0, len(h)), h...))
			_, err := p.readCommand("WELCOME")
			return err
		}},
		{"HELLO cut to 199 bytes", func(p *curvePeer) error {
			p.greet()
			p.send(commandFrame(p.cc.hello()[:199]))
			_, err := p.readCommand("WELCOME")
			return err
		}},
		{"HELLO of 201 bytes", func(p *curvePeer) error {
			p.greet()
			p.send(commandFrame(append(p.cc.hello(), 0)))
			_, err := p.readCommand("WELCOME")
			return err
		}},
		{"INITIATE before HELLO", func(p *curvePeer) error {
			p.greet()
			p.cc.cookie = make([]byte, 96)
			p.send(commandFrame(p.cc.initiate(readyMetadata("DEALER", nil))))
			_, err := p.readCommand("WELCOME")
			return err
		}},
		{"INITIATE with another connection's cookie", func(p *curvePeer) error {
			q := dialCurve(t, b.addr, keys.Public)
			defer q.c.Close()
			if err := q.greet(); err != nil {
				return fmt.Errorf("the other connection: %w", err) // not the refusal tested
			}
			if err := q.sendHello(); err != nil {
				return fmt.Errorf("the other connection: %w", err)
			}
			p.greet()
			p.sendHello()
			p.cc.cookie = q.cc.cookie
			return p.sendInitiate(readyMetadata("DEALER", nil), "ROUTER")
		}},
		{"INITIATE with a tampered cookie", func(p *curvePeer) error {
			p.greet()
			p.sendHello()
			p.cc.cookie = bytes.Clone(p.cc.cookie)
			p.cc.cookie[40] ^= 1
			return p.sendInitiate(readyMetadata("DEALER", nil), "ROUTER")
		}},
		{"INITIATE vouching for another server", func(p *curvePeer) error {
			p.cc.vouchServer = otherPub
			return p.handshake("DEALER", nil)
		}},
		{"INITIATE vouching for another transient key", func(p *curvePeer) error {
			p.cc.vouchCn = otherPub
			return p.handshake("DEALER", nil)
		}},
		{"INITIATE vouch not signed by C", func(p *curvePeer) error {
			p.cc.vouchSec = otherSec
			return p.handshake("DEALER", nil)
		}},
		{"INITIATE reusing HELLO's nonce", func(p *curvePeer) error {
			p.greet()
			p.sendHello()
			p.cc.nonce = 0
			return p.sendInitiate(readyMetadata("DEALER", nil), "ROUTER")
		}},
		{"INITIATE with a flipped box byte", func(p *curvePeer) error {
			p.greet()
			p.sendHello()
			init := p.cc.initiate(readyMetadata("DEALER", nil))
			init[len(init)-1] ^= 1
			p.send(commandFrame(init))
			_, err := p.readCommand("READY")
			return err
		}},
		{"INITIATE without Socket-Type", func(p *curvePeer) error {
			p.greet()
			p.sendHello()
			return p.sendInitiate(AppendProperty(nil, "Identity", []byte("x")), "ROUTER")
		}},
		{"INITIATE with metadata overrun", func(p *curvePeer) error {
			p.greet()
			p.sendHello()
			return p.sendInitiate([]byte("\x0bSocket-Type\x00\x00\x01\x00DEALER"), "ROUTER")
		}},
		{"INITIATE as a PUB", func(p *curvePeer) error {
			// READY comes (the type is checked after it), then the close.
			p.handshake("PUB", nil)
			return errors.New("refused after READY")
		}},
		{"identity of 256 bytes", func(p *curvePeer) error {
			return p.handshake("DEALER", bytes.Repeat([]byte("i"), 256))
		}},
		{"a message before INITIATE", func(p *curvePeer) error {
			p.greet()
			p.sendHello()
			p.send(message([]byte("early")))
			_, err := p.readCommand("READY")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := dialCurve(t, b.addr, keys.Public)
			if err := tc.run(p); err == nil {
				t.Fatal("the handshake completed")
			}
			closedAlone(t, b, p, by)
		})
	}
	goodClientServed(t, b, keys)
}

// closedAlone checks that the door closed p, and only p: the bystander
// still gets through, and the ROUTER's next message is the bystander's, so
// nothing of what p sent reached it.
func closedAlone(t *testing.T, b *bound, p, bystander *curvePeer) {
	t.Helper()
	if !p.closedWithin(3 * time.Second) {
		t.Fatal("the door kept the connection")
	}
	waitConns(t, b, 1)
	curveRoundTrip(t, b, bystander, "bystander")
}

// goodClientServed checks that a new, well-behaved client is served.
func goodClientServed(t *testing.T, b *bound, keys *CurveKeys) {
	t.Helper()
	good := dialCurve(t, b.addr, keys.Public)
	good.mustHandshake(t, "DEALER", []byte("good"))
	curveRoundTrip(t, b, good, "good")
}

// After the handshake every frame must be a MESSAGE that opens, with a
// nonce above the last: anything else costs that connection, no other.
func TestCurveDoorClosesTamperedMessages(t *testing.T) {
	b, keys, by := newCurveRouter(t, Limits{MaxMessage: 256 << 10})
	for i, tc := range []struct {
		name string
		// bytes returns what p sends after its handshake; first, when
		// not empty, is a message the ROUTER must get before the close.
		bytes func(p *curvePeer) (first string, out []byte)
	}{
		{"flipped ciphertext byte", func(p *curvePeer) (string, []byte) {
			m := p.cc.sealMessage([]byte("tampered"))
			m[len(m)-3] ^= 0x01
			return "", m
		}},
		{"flipped MAC byte", func(p *curvePeer) (string, []byte) {
			m := p.cc.sealMessage([]byte("tampered"))
			m[2+16] ^= 0x80
			return "", m
		}},
		{"flipped nonce byte", func(p *curvePeer) (string, []byte) {
			m := p.cc.sealMessage([]byte("tampered"))
			m[2+15] ^= 0x10 // a larger nonce, but not the one sealed with
			return "", m
		}},
		{"flipped byte in a large frame", func(p *curvePeer) (string, []byte) {
			m := p.cc.sealMessage(make([]byte, 200<<10))
			m[100<<10] ^= 0x01
			return "", m
		}},
		{"nonce reused", func(p *curvePeer) (string, []byte) {
			m := p.cc.sealMessage([]byte("once"))
			return "once", append(m, p.cc.sealWith(p.cc.nonce, 0, []byte("replayed"))...)
		}},
		{"the same MESSAGE twice", func(p *curvePeer) (string, []byte) {
			m := p.cc.sealMessage([]byte("once"))
			return "once", append(m, m...)
		}},
		{"nonce lowered", func(p *curvePeer) (string, []byte) {
			p.cc.nonce += 10
			m := p.cc.sealMessage([]byte("ahead"))
			return "ahead", append(m, p.cc.sealWith(p.cc.nonce-1, 0, []byte("lower"))...)
		}},
		{"nonce zero", func(p *curvePeer) (string, []byte) {
			return "", p.cc.sealWith(0, 0, []byte("zero"))
		}},
		{"INITIATE's nonce", func(p *curvePeer) (string, []byte) {
			return "", p.cc.sealWith(2, 0, []byte("two"))
		}},
		{"sealed in the server's direction", func(p *curvePeer) (string, []byte) {
			short := binary.BigEndian.AppendUint64(nil, p.cc.nonce+1)
			out := append(AppendFrameHeader(nil, 0, 16+box.Overhead+6), "\x07MESSAGE"...)
			out = append(out, short...)
			return "", box.SealAfterPrecomputation(out, []byte("\x00hello"), curveNonce("CurveZMQMESSAGES", short), &p.cc.shared)
		}},
		{"plain frame", func(p *curvePeer) (string, []byte) {
			return "", message([]byte("not sealed"))
		}},
		{"plain PING", func(p *curvePeer) (string, []byte) {
			return "", AppendPing(nil, []byte("x"))
		}},
		{"MESSAGE of 32 bytes", func(p *curvePeer) (string, []byte) {
			m := p.cc.sealMessage(nil) // 33 bytes: drop the flags byte's ciphertext
			return "", append(AppendFrameHeader(nil, 0, 32), m[2:34]...)
		}},
		{"MESSAGE cut by its header", func(p *curvePeer) (string, []byte) {
			m := p.cc.sealMessage([]byte("cut"))
			m[1]--
			return "", m[:len(m)-1]
		}},
		{"another command name", func(p *curvePeer) (string, []byte) {
			m := p.cc.sealMessage([]byte("x"))
			copy(m[2:], "\x07MASSAGE")
			return "", m
		}},
		{"sealed READY", func(p *curvePeer) (string, []byte) {
			return "", p.cc.sealCommand("READY", readyMetadata("DEALER", nil))
		}},
		{"sealed SUBSCRIBE on a ROUTER", func(p *curvePeer) (string, []byte) {
			return "", p.cc.sealCommand("SUBSCRIBE", nil)
		}},
		{"sealed command inside a message", func(p *curvePeer) (string, []byte) {
			return "", append(p.cc.seal(boxMore, []byte("a")), p.cc.sealCommand("PING", []byte{0, 0})...)
		}},
		{"sealed command with MORE", func(p *curvePeer) (string, []byte) {
			return "", p.cc.seal(boxCommand|boxMore, []byte("\x04PING\x00\x00"))
		}},
		{"sealed PING of 20 bytes of context", func(p *curvePeer) (string, []byte) {
			return "", p.cc.sealCommand("PING", make([]byte, 22))
		}},
		{"frame over MaxMessage", func(p *curvePeer) (string, []byte) {
			return "", p.cc.sealMessage(make([]byte, 257<<10))
		}},
		{"message over MaxMessage in frames", func(p *curvePeer) (string, []byte) {
			return "", p.cc.sealMessage(make([]byte, 130<<10), make([]byte, 130<<10))
		}},
		{"MESSAGE frame declaring 2^62 bytes", func(p *curvePeer) (string, []byte) {
			return "", append(binary.BigEndian.AppendUint64([]byte{FlagLong}, 1<<62), "\x07MESSAGE"...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// An identity of its own: zmq4's ROUTER (the test's end, not
			// the door) forgets a closed connection's identity only once
			// its reader has seen the close, and under load a reply to a
			// reused identity went to the last subtest's closed connection.
			id := fmt.Sprintf("tamper-%d", i)
			p := dialCurve(t, b.addr, keys.Public)
			p.mustHandshake(t, "DEALER", []byte(id))
			curveRoundTrip(t, b, p, id)
			first, out := tc.bytes(p)
			p.send(out)
			if first != "" {
				m, err := recvWithin(t, b.sock, 5*time.Second)
				if err != nil || len(m.Frames) != 2 || string(m.Frames[1]) != first {
					t.Fatalf("router got %s %v, want [%s %s]", brief(m.Frames), err, id, first)
				}
			}
			closedAlone(t, b, p, by)
		})
	}
	goodClientServed(t, b, keys)
}

// PINGs and PONGs are sealed both ways, with the COMMAND flag inside: the
// door answers a client's PING with a sealed PONG.
func TestCurveDoorPingPong(t *testing.T) {
	b, keys, by := newCurveRouter(t, Limits{})
	testutil.NoErr(t, by.send(by.cc.sealCommand("PING", []byte("\x00\x02ctx-42"))))
	by.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	flags, body, err := by.recv()
	if err != nil || flags != boxCommand || string(body) != "\x04PONGctx-42" {
		t.Fatalf("got flags %#x %q %v; want a sealed PONG with the context", flags, body, err)
	}
	// A PING without context.
	by.send(by.cc.sealCommand("PING", []byte{0, 0}))
	if flags, body, err := by.recv(); err != nil || flags != boxCommand || string(body) != "\x04PONG" {
		t.Fatalf("got flags %#x %q %v", flags, body, err)
	}
	by.c.SetReadDeadline(time.Time{})
	curveRoundTrip(t, b, by, "bystander")

	// A second CURVE connection of the same peer with the same identity
	// is kept in a slot of its own; the identity's replies still go to
	// the first.
	got := make(chan [][]byte, 4)
	go func() { // ends when by's connection closes
		for {
			m, err := by.recvMessage(true)
			if err != nil {
				close(got)
				return
			}
			got <- m
		}
	}()
	second := dialCurve(t, b.addr, keys.Public)
	second.mustHandshake(t, "DEALER", []byte("bystander"))
	if second.closedWithin(300 * time.Millisecond) {
		t.Fatal("a second connection of the same peer claiming its identity was refused")
	}
	b.sock.SendMulti(zmq4.NewMsgFrom([]byte("bystander"), []byte("for the owner")))
	select {
	case m := <-got:
		if len(m) != 1 || string(m[0]) != "for the owner" {
			t.Fatalf("owner got %s", brief(m))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the owner lost its reply")
	}
}

// A CURVE subscriber subscribes with a sealed "\x01"+topic (ZMTP 3.0) and
// gets what the zmq4 PUB sends on its topics only.
func TestCurvePubDoor(t *testing.T) {
	keys := newCurveKeys(t)
	b := bindCurveDoor(t, "PUB", Limits{}, keys)
	p := dialCurve(t, b.addr, keys.Public)
	p.mustHandshake(t, "SUB", nil)
	q := dialCurve(t, b.addr, keys.Public) // a second subscriber, of everything
	q.mustHandshake(t, "SUB", nil)
	testutil.NoErr(t, p.sendMsg([]byte("\x01kernel.a")))
	p.sendMsg([]byte("\x01kernel.gone"))
	p.sendMsg([]byte("\x00kernel.gone"))
	p.sendMsg([]byte("junk"), []byte("dropped")) // not a subscription: read and dropped
	q.sendMsg([]byte("\x01"))
	testutil.WaitFor(t, 5*time.Second, "the subscriptions", func() bool {
		ts := b.door.Topics()
		return len(ts) == 2 && (string(ts[0]) == "kernel.a" && len(ts[1]) == 0 || string(ts[1]) == "kernel.a" && len(ts[0]) == 0)
	})
	topics := []string{"kernel.a.status", "other.x", "kernel.gone.x", "kernel.a.stream"}
	for _, tp := range topics {
		testutil.NoErr(t, b.sock.SendMulti(zmq4.NewMsgFrom([]byte(tp), []byte("body of "+tp))))
	}
	for _, want := range []string{"kernel.a.status", "kernel.a.stream"} {
		m, err := p.recvMessageWithin(5 * time.Second)
		if err != nil || len(m) != 2 || string(m[0]) != want || string(m[1]) != "body of "+want {
			t.Fatalf("subscriber got %s %v, want %s", brief(m), err, want)
		}
	}
	if m, err := p.recvMessageWithin(300 * time.Millisecond); err == nil {
		t.Fatalf("subscriber got %s off its topics", brief(m))
	}
	for _, want := range topics {
		m, err := q.recvMessageWithin(5 * time.Second)
		if err != nil || len(m) != 2 || string(m[0]) != want {
			t.Fatalf(`"" subscriber got %s %v, want %s`, brief(m), err, want)
		}
	}
	// A large message reaches a subscriber whole.
	big := make([]byte, 1<<20)
	rand.Read(big)
	b.sock.SendMulti(zmq4.NewMsgFrom([]byte("kernel.a.big"), big))
	for _, sub := range []*curvePeer{p, q} {
		if m, err := sub.recvMessageWithin(10 * time.Second); err != nil || len(m) != 2 || !bytes.Equal(m[1], big) {
			t.Fatalf("large message: %s %v", brief(m), err)
		}
	}
	// Cancelling stops the flow.
	p.sendMsg([]byte("\x00kernel.a"))
	testutil.WaitFor(t, 5*time.Second, "the cancel", func() bool { return len(b.door.Topics()) == 1 })
	b.sock.SendMulti(zmq4.NewMsgFrom([]byte("kernel.a.late"), []byte("x")))
	if m, err := q.recvMessageWithin(5 * time.Second); err != nil || len(m) == 0 || string(m[0]) != "kernel.a.late" {
		t.Fatalf(`"" subscriber got %s %v`, brief(m), err)
	}
	if m, err := p.recvMessageWithin(300 * time.Millisecond); err == nil {
		t.Fatalf("a cancelled subscriber got %s", brief(m))
	}
	// A DEALER is no subscriber.
	d := dialCurve(t, b.addr, keys.Public)
	d.handshake("DEALER", nil)
	if !d.closedWithin(3 * time.Second) {
		t.Fatal("the PUB door kept a DEALER")
	}
}

// The opener lets an opened frame go once the reader zmq4 reads through
// has taken it: a client that sent one large message and then nothing
// must not keep the supervisor holding it (it once held it, uncounted in
// the receive budget, until that client's next frame).
func TestCurveOpenerLetsLargeFramesGo(t *testing.T) {
	const size = 32 << 20
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapInuse)
	}
	cs, cc := curvePair(t, "ROUTER")
	before := heap()
	pr, pw := io.Pipe() // keeps nothing of what went through
	go func(m []byte) {
		pw.Write(m)
		pw.Close()
	}(cc.sealMessage(make([]byte, size)))
	sh := NewShared(Limits{}, nil)
	in := &inbound{rd: bufio.NewReaderSize(pr, readBuffer), lim: &sh.lim, budget: sh}
	o := &opener{rd: in.rd, cs: cs, lim: &sh.lim}
	in.open = o
	msgs, err := readAll(in, 1<<30) // the relay takes the frame; the client then sends nothing
	if len(msgs) != 1 || len(msgs[0][0]) != size || !errors.Is(err, io.EOF) {
		t.Fatalf("read %d messages, %v; want the frame (%d bytes) and EOF", len(msgs), err, size)
	}
	msgs = nil
	held := heap() - before
	runtime.KeepAlive(o)
	runtime.KeepAlive(in)
	t.Logf("heap held after the frame was read: %d MiB", held>>20)
	if held > size/4 {
		t.Fatalf("%d MiB still held after a %d MiB frame was read", held>>20, size>>20)
	}
	if r := sh.receiving.Load(); r != 0 {
		t.Fatalf("%d bytes left in the receive budget", r)
	}
}

// detRand is a deterministic stream of random bytes (fuzz inputs replay
// the same way each time).
func detRand(seed uint64) io.Reader {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return mrand.NewChaCha8(s)
}
