package zmtp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The seed corpus: what real clients (jupyter_client, pyzmq/libzmq) sent
// on each channel, and hand-made hostile streams (testdata/capture, see
// its README), plus the fuzzers' own finds under testdata/fuzz. `go test`
// replays all of them; `go test -fuzz FuzzDoor ./internal/zmtp` explores.

func addCaptures(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "capture", "*.bin"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed captures in testdata/capture (%v)", err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	ready := AppendReady(AppendGreeting(nil, false), "DEALER", []byte("id"))
	f.Add(ready)
	f.Add(append(bytes.Clone(ready), binary.BigEndian.AppendUint64([]byte{FlagLong}, 1<<62)...))
	f.Add(append(bytes.Clone(ready), FlagCommand, 1, 200))
	// a large frame cut short: staged, its header must never reach zmq4
	f.Add(append(append(bytes.Clone(ready), binary.BigEndian.AppendUint64([]byte{FlagLong}, 200000)...), "cut short"...))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
}

// fuzzLimits are small, so the fuzzer reaches every limit.
var fuzzLimits = Limits{MaxMessage: 1 << 20, MaxFrames: 64, MaxSubscriptions: 4, MaxTopic: 32,
	HandshakeTimeout: time.Second}

// FuzzDoor feeds a peer's whole byte stream (greeting, READY, frames) to
// the door's handshake and then to the reader zmq4 reads through, on a
// ROUTER and on the PUB. Whatever the bytes: no panic, no allocation
// beyond the limits, and what zmq4 gets is the prelude followed by well
// formed message frames within the limits, never a command.
func FuzzDoor(f *testing.F) {
	addCaptures(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range []string{"ROUTER", "PUB"} {
			sh := NewShared(fuzzLimits, nil)
			d := &Door{name: "fuzz", socketType: typ, sh: sh, ready: make(chan *conn, 1),
				done: make(chan struct{}), conns: map[*conn]struct{}{}, shaking: map[net.Conn]*shakeInfo{},
				ids: map[string]*conn{}}
			c, err := d.shake(&fakeConn{r: bytes.NewReader(data)}, peer{key: "fuzz", uid: -1})
			if err != nil {
				continue
			}
			got, rerr := io.ReadAll(io.LimitReader(c, 4<<20))
			if rerr == nil && len(got) < 4<<20 {
				t.Fatalf("%s: the reader ended without an error", typ)
			}
			checkDelivered(t, typ, got, &sh.lim)
			if sh.receiving.Load() != 0 {
				t.Fatalf("%s: %d bytes left in the receive budget", typ, sh.receiving.Load())
			}
		}
	})
}

// FuzzInbound feeds bytes after a handshake straight to the reader (the
// first byte picks ROUTER or PUB).
func FuzzInbound(f *testing.F) {
	addCaptures(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		pub := data[0]&1 == 1
		sh := NewShared(fuzzLimits, nil)
		var subs int
		in := &inbound{rd: bufio.NewReaderSize(bytes.NewReader(data[1:]), readBuffer), pub: pub, lim: &sh.lim,
			budget: sh, hooks: inboundHooks{subscribe: func(topic []byte, on bool) error {
				if len(topic) > sh.lim.MaxTopic {
					t.Fatalf("topic of %d bytes passed", len(topic))
				}
				subs++
				return nil
			}}}
		got, err := io.ReadAll(io.LimitReader(in, 4<<20))
		if err == nil && len(got) < 4<<20 {
			t.Fatal("the reader ended without an error")
		}
		if pub && len(got) > 0 {
			t.Fatalf("iopub: %d bytes reached zmq4", len(got))
		}
		typ := "ROUTER"
		if pub {
			typ = "PUB"
		}
		checkFrames(t, typ, got, &sh.lim)
		if sh.receiving.Load() != 0 {
			t.Fatalf("%d bytes left in the receive budget", sh.receiving.Load())
		}
	})
}

// checkDelivered checks what zmq4 read from a handshaken conn.
func checkDelivered(t *testing.T, typ string, got []byte, lim *Limits) {
	t.Helper()
	if len(got) < GreetingLen {
		t.Fatalf("%s: prelude cut short (%d bytes)", typ, len(got))
	}
	if _, err := ParseGreeting(got); err != nil {
		t.Fatalf("%s: prelude greeting: %v", typ, err)
	}
	rest := got[GreetingLen:]
	h, err := ParseFrameHeader(rest)
	if err != nil || !h.Command() || uint64(len(rest)) < uint64(h.Len)+h.Size {
		t.Fatalf("%s: prelude READY: %+v %v", typ, h, err)
	}
	r, err := ParseReady(rest[h.Len : uint64(h.Len)+h.Size])
	if err != nil || !compatible(typ, r.SocketType) {
		t.Fatalf("%s: prelude READY %+v: %v", typ, r, err)
	}
	if typ == "ROUTER" && (len(r.Identity) == 0 || r.Identity[0] == 0 && len(r.Identity) != 9) {
		t.Fatalf("ROUTER: zmq4 got identity %q", r.Identity)
	}
	rest = rest[uint64(h.Len)+h.Size:]
	if typ == "PUB" {
		if !bytes.HasPrefix(rest, []byte{0, 1, 1}) {
			t.Fatalf("PUB: prelude without the subscription: %q", rest)
		}
		rest = rest[3:]
	}
	checkFrames(t, typ, rest, lim)
}

// checkFrames checks frames handed to zmq4 (a cut-off tail is fine: the
// stream ended there with an error).
func checkFrames(t *testing.T, typ string, b []byte, lim *Limits) {
	t.Helper()
	if typ == "PUB" && len(b) > 0 {
		t.Fatalf("PUB: %d bytes after the prelude reached zmq4", len(b))
	}
	var size uint64
	frames := 0
	for len(b) > 0 {
		if len(b) < HeaderLen(b[0]) {
			return
		}
		h, err := ParseFrameHeader(b)
		if err != nil {
			t.Fatalf("zmq4 got a bad header: %v", err)
		}
		if h.Command() {
			t.Fatal("zmq4 got a command")
		}
		frames++
		size += h.Size
		if size > uint64(lim.MaxMessage) || frames > lim.MaxFrames {
			t.Fatalf("zmq4 got a message of %d bytes in %d frames", size, frames)
		}
		if uint64(len(b)-h.Len) < h.Size {
			if h.Size > stageAbove {
				// zmq4 allocates a header's size as it reads it: a large
				// frame's header must come with its whole body or not at all.
				t.Fatalf("zmq4 got the header of a %d-byte frame without its body", h.Size)
			}
			return
		}
		b = b[uint64(h.Len)+h.Size:]
		if !h.More() {
			size, frames = 0, 0
		}
	}
}

// fakeConn is a peer whose bytes are data; what we write is dropped.
type fakeConn struct{ r io.Reader }

func (c *fakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return fakeAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return fakeAddr{} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

type fakeAddr struct{}

func (fakeAddr) Network() string { return "fake" }
func (fakeAddr) String() string  { return "fake:0" }

func TestFuzzHarnessSeesRealTraffic(t *testing.T) {
	// The captures of real clients must pass the door and reach zmq4
	// whole; a fuzz target that rejected them would prove nothing.
	for name, want := range map[string]int{"client-shell.bin": 2, "shell-zmtp30.bin": 6, "heartbeat-zmtp30.bin": 1, "iopub-zmtp31.bin": 1} { // iopub: the prelude's subscription only
		data, err := os.ReadFile(filepath.Join("testdata", "capture", name))
		if err != nil {
			t.Fatal(err)
		}
		typ := "ROUTER"
		if name[:5] == "iopub" {
			typ = "PUB"
		}
		sh := NewShared(Limits{}, nil)
		d := &Door{name: "t", socketType: typ, sh: sh, ready: make(chan *conn, 1), done: make(chan struct{}),
			conns: map[*conn]struct{}{}, shaking: map[net.Conn]*shakeInfo{}, ids: map[string]*conn{}}
		c, err := d.shake(&fakeConn{r: bytes.NewReader(data)}, peer{key: "fuzz", uid: -1})
		if err != nil {
			t.Fatalf("%s: handshake: %v", name, err)
		}
		subs := map[string]int{}
		if orig := c.in.hooks.subscribe; orig != nil {
			c.in.hooks.subscribe = func(topic []byte, on bool) error {
				err := orig(topic, on)
				c.mu.Lock()
				clear(subs)
				maps.Copy(subs, c.subs)
				c.mu.Unlock()
				return err
			}
		}
		got, err := io.ReadAll(c)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("%s: ended with %v, want EOF", name, err)
		}
		checkDelivered(t, typ, got, &sh.lim)
		msgs := 0
		for b := got[GreetingLen:]; len(b) > 0; {
			h, _ := ParseFrameHeader(b)
			if !h.More() && !h.Command() {
				msgs++
			}
			b = b[uint64(h.Len)+h.Size:]
		}
		t.Logf("%s: %d bytes, %d messages to zmq4", name, len(got), msgs)
		if msgs != want {
			t.Fatalf("%s: %d messages reached zmq4, want %d", name, msgs, want)
		}
		if typ == "PUB" && (len(subs) != 1 || subs[""] != 1) {
			t.Fatalf("%s: subscriptions %v, want only \"\"", name, subs)
		}
	}
}
