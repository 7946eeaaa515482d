package wrapper

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// frame encodes one ZMTP frame as zmq4 writes it: header, then body.
func frame(flags byte, body []byte) [][]byte {
	if len(body) > 255 {
		h := make([]byte, 9)
		h[0] = flags | flagLong
		binary.BigEndian.PutUint64(h[1:], uint64(len(body)))
		return [][]byte{h, body}
	}
	return [][]byte{{flags, byte(len(body))}, body}
}

// stream is a greeting, a READY command and two messages, as the pieces
// zmq4 passes to Write, and the expected message kinds.
func stream() (pieces [][]byte, control []bool) {
	pieces = append(pieces, make([]byte, zmtpGreetingLen))
	pieces = append(pieces, frame(flagCommand, []byte("\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB"))...)
	pieces = append(pieces, frame(flagMore, []byte("topic"))...)
	pieces = append(pieces, frame(flagMore, bytes.Repeat([]byte("y"), 300))...)
	pieces = append(pieces, frame(flagMore, nil)...)
	pieces = append(pieces, frame(0, []byte("last"))...)
	pieces = append(pieces, frame(0, []byte("single"))...)
	return pieces, []bool{true, true, false, false}
}

func TestFramerFindsMessagesInAnyChunking(t *testing.T) {
	pieces, wantControl := stream()
	all := bytes.Join(pieces, nil)
	for _, tc := range []struct {
		name   string
		chunks func() [][]byte
	}{
		{"as zmq4 writes", func() [][]byte { return pieces }},
		{"one write", func() [][]byte { return [][]byte{all} }},
		{"byte by byte", func() [][]byte {
			var out [][]byte
			for i := range all {
				out = append(out, all[i:i+1])
			}
			return out
		}},
		{"7-byte chunks", func() [][]byte {
			var out [][]byte
			for i := 0; i < len(all); i += 7 {
				out = append(out, all[i:min(i+7, len(all))])
			}
			return out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f framer
			f.greeting = zmtpGreetingLen
			var starts, ends int
			var control []bool
			total := 0
			for _, c := range tc.chunks() {
				for len(c) > 0 {
					k, start, end, ctl := f.step(c)
					if k == 0 {
						t.Fatalf("step consumed nothing")
					}
					if start {
						starts++
						control = append(control, ctl)
					}
					if end {
						ends++
						if ends != starts {
							t.Fatalf("message %d ended before it started", ends)
						}
					}
					total += k
					c = c[k:]
				}
			}
			if starts != len(wantControl) || ends != len(wantControl) || total != len(all) {
				t.Fatalf("starts %d ends %d bytes %d; want %d messages, %d bytes",
					starts, ends, total, len(wantControl), len(all))
			}
			for i := range control {
				if control[i] != wantControl[i] {
					t.Fatalf("message %d control = %v, want %v", i, control[i], wantControl[i])
				}
			}
		})
	}
}

// A peer that does not read: Write never blocks, the queue stays bounded,
// and what the peer finally reads is whole messages only.
func TestPeerConnDropsWholeMessagesForAStalledPeer(t *testing.T) {
	setQueueLimits(t, 256<<10, 1<<20)

	raw, peer := tcpPair(t)
	pc := newPeerConn(raw)
	defer pc.Close()

	pieces, _ := stream()
	head := pieces[:3] // greeting and READY
	for _, p := range head {
		pc.Write(p)
	}
	body := bytes.Repeat([]byte("z"), 64<<10)
	const n = 2000 // 128 MB: far more than socket buffers and the queue
	start := time.Now()
	for i := 0; i < n; i++ {
		for _, p := range append(frame(flagMore, []byte("kernel.x.stream")), frame(0, body)...) {
			if _, err := pc.Write(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("writes to a stalled peer took %v: they block", d)
	}
	pc.mu.Lock()
	queued := len(pc.out)
	pc.mu.Unlock()
	if queued > queueHardLimit+len(body)+64 {
		t.Fatalf("queue holds %d bytes, hard limit %d", queued, queueHardLimit)
	}
	dropped := pc.dropped.Load()
	if dropped == 0 {
		t.Fatal("nothing was dropped")
	}

	// The peer now reads: a clean stream of whole messages.
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(peer)
	if _, err := io.ReadFull(r, make([]byte, zmtpGreetingLen)); err != nil {
		t.Fatal(err)
	}
	msgs := 0
	for uint64(msgs)+dropped < n {
		flags, size, err := readFrameHeader(r)
		if err != nil {
			break
		}
		if _, err := io.CopyN(io.Discard, r, int64(size)); err != nil {
			t.Fatalf("frame body cut short after %d messages: %v", msgs, err)
		}
		if flags&flagCommand == 0 && size != 15 && size != uint64(len(body)) {
			t.Fatalf("frame of %d bytes: the stream is out of step", size)
		}
		if flags&(flagMore|flagCommand) == 0 {
			msgs++
		}
	}
	if uint64(msgs)+dropped != n {
		t.Fatalf("peer read %d whole messages, %d dropped, want %d in all", msgs, dropped, n)
	}
	t.Logf("delivered %d, dropped %d", msgs, dropped)
}

func readFrameHeader(r *bufio.Reader) (flags byte, size uint64, err error) {
	var h [9]byte
	if _, err = io.ReadFull(r, h[:2]); err != nil {
		return 0, 0, err
	}
	if h[0]&flagLong == 0 {
		return h[0], uint64(h[1]), nil
	}
	if _, err = io.ReadFull(r, h[2:9]); err != nil {
		return 0, 0, err
	}
	return h[0], binary.BigEndian.Uint64(h[1:9]), nil
}

// zmq4 v0.17.0 never answers a libzmq peer's heartbeat PING; the transport
// does, between messages, with the PING's context.
func TestPeerConnAnswersPing(t *testing.T) {
	a, b := tcpPair(t)
	pc := newPeerConn(a)
	defer pc.Close()
	pc.Write(make([]byte, zmtpGreetingLen)) // our greeting
	// The peer's greeting, then PING with TTL 0x0010 and context "ctx".
	b.Write(make([]byte, zmtpGreetingLen))
	ping := append([]byte{flagCommand, 5 + 2 + 3, 4, 'P', 'I', 'N', 'G', 0, 0x10}, "ctx"...)
	b.Write(ping)
	// zmq4 reads the greeting and the frame through pc.Read.
	if _, err := io.ReadFull(pc, make([]byte, zmtpGreetingLen+len(ping))); err != nil {
		t.Fatal(err)
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, zmtpGreetingLen+2+5+3)
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatalf("no PONG: %v", err)
	}
	want := append([]byte{flagCommand, 5 + 3, 4, 'P', 'O', 'N', 'G'}, "ctx"...)
	if !bytes.Equal(got[zmtpGreetingLen:], want) {
		t.Fatalf("got %q, want PONG %q", got[zmtpGreetingLen:], want)
	}
}

func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// setQueueLimits shrinks the queue limits for one test.
func setQueueLimits(t *testing.T, soft, hard int) {
	oldSoft, oldHard := queueLimit, queueHardLimit
	queueLimit, queueHardLimit = soft, hard
	t.Cleanup(func() { queueLimit, queueHardLimit = oldSoft, oldHard })
}

// A peer that is slow but keeps reading is not dropped from below the hard
// limit, however far past the soft one its queue grows.
func TestPeerConnKeepsASlowReader(t *testing.T) {
	setQueueLimits(t, 256<<10, 64<<20)
	raw, peer := tcpPair(t)
	pc := newPeerConn(raw)
	defer pc.Close()
	pc.Write(make([]byte, zmtpGreetingLen))
	const n = 200 // 64 KiB each: 12.8 MB, 50 times the soft limit
	got := make(chan int, 1)
	go func() { // reads about 25 MB/s
		r := bufio.NewReader(peer)
		io.ReadFull(r, make([]byte, zmtpGreetingLen))
		msgs := 0
		for msgs < n {
			_, size, err := readFrameHeader(r)
			if err != nil {
				break
			}
			io.CopyN(io.Discard, r, int64(size))
			msgs++
			if msgs%4 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		got <- msgs
	}()
	body := bytes.Repeat([]byte("s"), 64<<10)
	for i := 0; i < n; i++ {
		for _, p := range frame(0, body) {
			pc.Write(p)
		}
	}
	select {
	case msgs := <-got:
		if msgs != n || pc.dropped.Load() != 0 {
			t.Fatalf("slow reader got %d of %d, %d dropped", msgs, n, pc.dropped.Load())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("slow reader did not get everything; %d dropped", pc.dropped.Load())
	}
}
