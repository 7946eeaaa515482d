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

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
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
		testutil.NoErr(f, err)
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
			d := &Door{name: "fuzz", socketType: typ, sh: sh,
				done: make(chan struct{}), conns: map[*conn]struct{}{}, shaking: map[net.Conn]*shakeInfo{},
				ids: map[string]*conn{}}
			c, err := d.shake(&fakeConn{r: bytes.NewReader(data)}, peer{key: "fuzz", uid: -1})
			if err != nil {
				continue
			}
			if typ == "ROUTER" && (len(c.identity) == 0 || c.identity[0] == 0 && len(c.identity) != 9) {
				t.Fatalf("ROUTER: routing identity %q", c.identity)
			}
			got, _ := readAll(c.in, 4<<20)
			checkMessages(t, typ, got, &sh.lim)
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
		got, _ := readAll(in, 4<<20)
		typ := "ROUTER"
		if pub {
			typ = "PUB"
		}
		checkMessages(t, typ, got, &sh.lim)
		if sh.receiving.Load() != 0 {
			t.Fatalf("%d bytes left in the receive budget", sh.receiving.Load())
		}
	})
}

// readAll reads in's messages, as a door's serve does, until the reader
// fails or limit bytes came, and how it ended.
func readAll(in *inbound, limit int) (msgs [][][]byte, err error) {
	n := 0
	for n < limit {
		msg, err := in.next(0)
		if err != nil {
			return msgs, err
		}
		for _, f := range msg {
			n += len(f)
		}
		msgs = append(msgs, msg)
		in.done()
	}
	return msgs, nil
}

// checkMessages checks the messages a reader returned: none on iopub,
// each within the limits.
func checkMessages(t *testing.T, typ string, msgs [][][]byte, lim *Limits) {
	t.Helper()
	if typ == "PUB" && len(msgs) > 0 {
		t.Fatalf("PUB: %d messages from a subscriber were returned", len(msgs))
	}
	for _, m := range msgs {
		size := 0
		for _, f := range m {
			size += len(f)
		}
		if len(m) == 0 || len(m) > lim.MaxFrames || size > int(lim.MaxMessage) {
			t.Fatalf("a message of %d bytes in %d frames was returned", size, len(m))
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
	// The captures of real clients must pass the door and come out
	// whole; a fuzz target that rejected them would prove nothing.
	for name, want := range map[string]int{"client-shell.bin": 2, "shell-zmtp30.bin": 6, "heartbeat-zmtp30.bin": 1, "iopub-zmtp31.bin": 0} { // iopub: subscriptions, applied, are no messages
		data, err := os.ReadFile(filepath.Join("testdata", "capture", name))
		testutil.NoErr(t, err)
		typ := "ROUTER"
		if name[:5] == "iopub" {
			typ = "PUB"
		}
		sh := NewShared(Limits{}, nil)
		d := &Door{name: "t", socketType: typ, sh: sh, done: make(chan struct{}),
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
		got, err := readAll(c.in, 1<<30)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("%s: ended with %v, want EOF", name, err)
		}
		checkMessages(t, typ, got, &sh.lim)
		t.Logf("%s: %d messages", name, len(got))
		if len(got) != want {
			t.Fatalf("%s: %d messages returned, want %d", name, len(got), want)
		}
		if typ == "PUB" && (len(subs) != 1 || subs[""] != 1) {
			t.Fatalf("%s: subscriptions %v, want only \"\"", name, subs)
		}
	}
}
