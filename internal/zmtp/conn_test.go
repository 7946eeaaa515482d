package zmtp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testutil.NoErr(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", l.Addr().String())
	testutil.NoErr(t, err)
	b := <-accepted
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// writerConn is a conn as the inner (dialed) side makes them, with lim.
func writerConn(t *testing.T, lim Limits) (*conn, net.Conn) {
	raw, peer := tcpPair(t)
	c := newConn(raw, bufio.NewReader(raw), NewShared(lim, nil))
	t.Cleanup(func() { c.Close() })
	return c, peer
}

func readFrameHeader(r *bufio.Reader) (FrameHeader, error) {
	first, err := r.Peek(1)
	if err != nil {
		return FrameHeader{}, err
	}
	b := make([]byte, HeaderLen(first[0]))
	if _, err := io.ReadFull(r, b); err != nil {
		return FrameHeader{}, err
	}
	return ParseFrameHeader(b)
}

// A peer that does not read: Write never blocks, the queue stays bounded,
// and what the peer finally reads is whole messages only.
func TestConnDropsWholeMessagesForAStalledPeer(t *testing.T) {
	c, peer := writerConn(t, Limits{QueueLimit: 256 << 10, HardLimit: 1 << 20})
	var log testutil.Buffer
	c.sh = NewShared(c.sh.Limits(), slog.New(slog.NewTextHandler(&log, nil)))
	pieces, _ := stream()
	for _, p := range pieces[:3] { // greeting and READY
		c.Write(p)
	}
	body := bytes.Repeat([]byte("z"), 64<<10)
	const n = 2000 // 128 MB: far more than socket buffers and the queue
	start := time.Now()
	for range n {
		for _, p := range append(frame(FlagMore, []byte("kernel.x.stream")), frame(0, body)...) {
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("writes to a stalled peer took %v: they block", d)
	}
	c.mu.Lock()
	queued := c.queued
	c.mu.Unlock()
	if queued > c.lim.HardLimit+int64(len(body))+64 {
		t.Fatalf("queue holds %d bytes, hard limit %d", queued, c.lim.HardLimit)
	}
	dropped := c.sh.Dropped()
	if dropped == 0 {
		t.Fatal("nothing was dropped")
	}

	// The peer now reads: a clean stream of whole messages.
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(peer)
	if _, err := io.ReadFull(r, make([]byte, GreetingLen)); err != nil {
		t.Fatal(err)
	}
	msgs := 0
	for int64(msgs)+dropped < n {
		h, err := readFrameHeader(r)
		if err != nil {
			break
		}
		if _, err := io.CopyN(io.Discard, r, int64(h.Size)); err != nil {
			t.Fatalf("frame body cut short after %d messages: %v", msgs, err)
		}
		if !h.Command() && h.Size != 15 && h.Size != uint64(len(body)) {
			t.Fatalf("frame of %d bytes: the stream is out of step", h.Size)
		}
		if !h.More() && !h.Command() {
			msgs++
		}
	}
	if int64(msgs)+dropped != n {
		t.Fatalf("peer read %d whole messages, %d dropped, want %d in all", msgs, dropped, n)
	}
	t.Logf("delivered %d, dropped %d", msgs, dropped)
	// Once the peer reads again, the log says how many it lost.
	want := fmt.Sprintf("dropped=%d", dropped)
	testutil.WaitFor(t, 5*time.Second, "a log line with "+want, func() bool { return strings.Contains(log.String(), want) })
	if !strings.Contains(log.String(), "lost messages") {
		t.Fatalf("log: %s", log.String())
	}
}

// A peer that is slow but keeps reading is not dropped from below the hard
// limit, however far past the soft one its queue grows.
func TestConnKeepsASlowReader(t *testing.T) {
	c, peer := writerConn(t, Limits{QueueLimit: 256 << 10, HardLimit: 64 << 20})
	c.Write(make([]byte, GreetingLen))
	const n = 200 // 64 KiB each: 12.8 MB, 50 times the soft limit
	got := make(chan int, 1)
	go func() { // reads about 25 MB/s
		r := bufio.NewReader(peer)
		io.ReadFull(r, make([]byte, GreetingLen))
		msgs := 0
		for msgs < n {
			h, err := readFrameHeader(r)
			if err != nil {
				break
			}
			io.CopyN(io.Discard, r, int64(h.Size))
			msgs++
			if msgs%4 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		got <- msgs
	}()
	body := bytes.Repeat([]byte("s"), 64<<10)
	for range n {
		for _, p := range frame(0, body) {
			c.Write(p)
		}
	}
	select {
	case msgs := <-got:
		if msgs != n || c.sh.Dropped() != 0 {
			t.Fatalf("slow reader got %d of %d, %d dropped", msgs, n, c.sh.Dropped())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("slow reader did not get everything; %d dropped", c.sh.Dropped())
	}
}

// Large frame bodies are queued by reference: the bytes the peer gets are
// the caller's, and a queue of many copies of one body holds one copy.
func TestConnQueuesLargeBodiesByReference(t *testing.T) {
	c, peer := writerConn(t, Limits{})
	c.Write(make([]byte, GreetingLen))
	body := bytes.Repeat([]byte("r"), 1<<20)
	for range 8 { // 8 MiB: more than a loopback socket takes unread
		for _, p := range frame(0, body) {
			c.Write(p)
		}
	}
	c.mu.Lock()
	refs := 0
	for _, seg := range c.queue {
		if len(seg) > 0 && &seg[len(seg)-1] == &body[len(body)-1] {
			refs++
		}
	}
	c.mu.Unlock()
	if refs == 0 {
		t.Fatal("no queued segment refers to the caller's body")
	}
	r := bufio.NewReader(peer)
	io.ReadFull(r, make([]byte, GreetingLen))
	for i := range 8 {
		h, err := readFrameHeader(r)
		if err != nil || h.Size != uint64(len(body)) {
			t.Fatalf("frame %d: %+v %v", i, h, err)
		}
		got := make([]byte, h.Size)
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("frame %d body differs (%v)", i, err)
		}
	}
	t.Logf("%d of 8 queued bodies were references", refs)
}

// TestRawReader: rawReader reads what arrives, honours deadlines as a
// timeout, and reports the peer's close as io.EOF, as net.Conn's Read does.
func TestRawReader(t *testing.T) {
	a, b := tcpPair(t)
	r := newRawReader(a)
	if r.rc == nil {
		t.Fatal("a TCP conn has no raw conn")
	}
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var ne net.Error
	if _, err := r.Read(make([]byte, 8)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	a.SetReadDeadline(time.Time{})
	if n, err := r.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d, %v", n, err)
	}
	go b.Write([]byte("hello"))
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(r, buf, 5)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	b.Close()
	if _, err := r.Read(buf); err != io.EOF {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
	a.Close()
	if _, err := r.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after close: %v, want net.ErrClosed", err)
	}
}
