package relay

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

// benchRelay is a relay between a kernel of zmq4 sockets and the ports a
// test client dials, all in this process: what the relay costs per
// message, without Python, for CPU profiles:
//
//	go test ./wrapper/relay -run '^$' -bench Relay -cpuprofile cpu.out
type benchRelay struct {
	kernel [5]zmq4.Socket
	outer  *Outer
	relay  *Relay
	signer *jmsg.Signer
}

func newBenchRelay(b *testing.B) *benchRelay {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	signer, err := jmsg.NewSigner("hmac-sha256", "bench-key")
	testutil.NoErr(b, err)
	br := &benchRelay{signer: signer}
	var inner *jmsg.ConnInfo
	br.kernel, inner = kernelSockets(b, ctx, "bench-key")
	outerInfo := &jmsg.ConnInfo{Transport: "tcp", IP: "127.0.0.1"}
	lg := slog.New(slog.DiscardHandler)
	br.outer, err = Bind(outerInfo, zmtp.NewShared(zmtp.Limits{}, lg))
	testutil.NoErr(b, err)
	b.Cleanup(br.outer.Close)
	events := make(chan Event, 16)
	br.relay = New(ctx, br.outer, inner, signer, events, Hooks{}, lg)
	b.Cleanup(br.relay.CloseInner)
	return br
}

// rawSub is an iopub client that reads whole messages off the wire with as
// little work as possible, so the profile is the relay's.
type rawSub struct {
	c net.Conn
	r *bufio.Reader
}

func dialRawSub(b *testing.B, addr string) *rawSub {
	b.Helper()
	c, err := net.Dial("tcp", addr)
	testutil.NoErr(b, err)
	b.Cleanup(func() { c.Close() })
	out := zmtp.AppendGreeting(nil, false)
	out = zmtp.AppendReady(out, "SUB", nil)
	out = zmtp.AppendFrameHeader(out, 0, 1)
	out = append(out, 1) // subscribe to everything
	if _, err := c.Write(out); err != nil {
		b.Fatal(err)
	}
	s := &rawSub{c: c, r: bufio.NewReaderSize(c, 1<<20)}
	if _, err := s.r.Discard(zmtp.GreetingLen); err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.frame(); err != nil { // READY
		b.Fatal(err)
	}
	return s
}

// frame skips one frame and returns its flags.
func (s *rawSub) frame() (byte, int, error) {
	hb, err := s.r.Peek(1)
	if err != nil {
		return 0, 0, err
	}
	hl := zmtp.HeaderLen(hb[0])
	hb, err = s.r.Peek(hl)
	if err != nil {
		return 0, 0, err
	}
	h, err := zmtp.ParseFrameHeader(hb)
	if err != nil {
		return 0, 0, err
	}
	_, _ = s.r.Discard(hl)
	_, err = s.r.Discard(int(h.Size))
	return h.Flags, int(h.Size), err
}

// message skips one message, commands included.
func (s *rawSub) message() error {
	for {
		f, _, err := s.frame()
		if err != nil {
			return err
		}
		if f&zmtp.FlagCommand == 0 && f&zmtp.FlagMore == 0 {
			return nil
		}
	}
}

// BenchmarkRelayDisplayData: display_data-sized iopub messages, kernel →
// relay → one subscriber, per message.
func BenchmarkRelayDisplayData(b *testing.B) {
	br := newBenchRelay(b)
	sub := dialRawSub(b, br.outer.doors[jmsg.IOPub].Addr().String())
	msg, err := jmsg.NewMessage(br.signer, [][]byte{[]byte("kernel.x.display_data")}, "display_data", nil, "s",
		map[string]any{"data": map[string]string{"text/plain": "12345"}, "metadata": map[string]any{}, "transient": map[string]any{}})
	testutil.NoErr(b, err)
	// The subscription reaches the relay, then the kernel, a moment after
	// the connection: send until the first message comes through.
	got := make(chan error, 1)
	go func() { got <- sub.message() }()
	for ready := false; !ready; {
		_ = br.kernel[jmsg.IOPub].SendMulti(zmq4.NewMsgFrom(msg...))
		select {
		case err := <-got:
			testutil.NoErr(b, err)
			ready = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	done := make(chan error, 1)
	b.ResetTimer()
	go func() {
		for range b.N {
			if err := sub.message(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range b.N {
		testutil.NoErr(b, br.kernel[jmsg.IOPub].SendMulti(zmq4.NewMsgFrom(msg...)))
	}
	select {
	case err := <-done:
		if err != nil && err != io.EOF {
			b.Fatal(err)
		}
	case <-time.After(time.Minute):
		b.Fatal("the subscriber did not get every message")
	}
}

// kernelSockets are a kernel's five sockets, listening on loopback ports,
// and the inner connection file naming them with key.
func kernelSockets(tb testing.TB, ctx context.Context, key string) ([5]zmq4.Socket, *jmsg.ConnInfo) {
	tb.Helper()
	var kernel [5]zmq4.Socket
	inner := &jmsg.ConnInfo{Transport: "tcp", IP: "127.0.0.1", Key: key, SignatureScheme: "hmac-sha256"}
	for _, ch := range jmsg.Channels {
		s := zmq4.NewRouter(ctx)
		if ch == jmsg.IOPub {
			s = zmq4.NewPub(ctx)
		}
		testutil.NoErr(tb, s.Listen("tcp://127.0.0.1:0"))
		tb.Cleanup(func() { s.Close() })
		_, port, _ := net.SplitHostPort(s.Addr().String())
		inner.Ports[ch], _ = strconv.Atoi(port)
		kernel[ch] = s
	}
	return kernel, inner
}
