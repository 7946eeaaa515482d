package zmtp

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// TestDoorSendRouter: Door.Send delivers to the client holding the
// identity, frames byte for byte (small, empty and large ones), drops a
// message for an identity nobody holds, and refuses an empty message.
func TestDoorSendRouter(t *testing.T) {
	b := bindDoor(t, "ROUTER", Limits{})
	p := dialRaw(t, b.addr)
	p.handshake("DEALER", []byte("alice"))
	testutil.WaitFor(t, 5*time.Second, "alice established", func() bool { return routerEstablished(b.door, "alice") })
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<14) // 256 KiB: by reference
	if err := b.door.Send([][]byte{[]byte("nobody"), []byte("lost")}); err != nil {
		t.Fatalf("send to an unknown identity: %v", err)
	}
	want := [][]byte{[]byte("<IDS|MSG>"), {}, []byte(strings.Repeat("h", 300)), big}
	testutil.NoErr(t, b.door.Send(append([][]byte{[]byte("alice")}, want...)))
	if err := b.door.Send(nil); err == nil {
		t.Fatal("an empty message was taken")
	}
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := p.readMessage(true)
	testutil.NoErr(t, err)
	if len(got) != len(want) {
		t.Fatalf("got %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d differs (%d bytes, want %d)", i, len(got[i]), len(want[i]))
		}
	}
	if !Drain(5*time.Second, b.door) {
		t.Fatal("Drain: not written")
	}
}

// TestDoorSendPub: Door.Send fans out to the subscribers whose topics
// match, in order, and a message sent just before Drain is written before
// Drain returns (zmq4's PUB handed messages over from a goroutine of its
// own, so a supervisor exiting right after its last notice could lose it).
func TestDoorSendPub(t *testing.T) {
	b := bindDoor(t, "PUB", Limits{})
	onlyA, all := dialRaw(t, b.addr), dialRaw(t, b.addr)
	onlyA.handshake("SUB", nil)
	all.handshake("SUB", nil)
	onlyA.send(message([]byte("\x01a")))
	all.send(message([]byte("\x01")))
	testutil.WaitFor(t, 5*time.Second, "both subscriptions", func() bool { return len(b.door.Topics()) == 2 })
	testutil.WaitFor(t, 5*time.Second, "both established", func() bool {
		n := 0
		b.door.mu.Lock()
		for c := range b.door.conns {
			c.mu.Lock()
			if c.established {
				n++
			}
			c.mu.Unlock()
		}
		b.door.mu.Unlock()
		return n == 2
	})
	const n = 200
	for i := range n {
		topic := "a"
		if i%2 == 1 {
			topic = "b"
		}
		testutil.NoErr(t, b.door.Send([][]byte{[]byte(topic + ".x"), []byte(fmt.Sprint(i))}))
	}
	if !Drain(5*time.Second, b.door) {
		t.Fatal("Drain: not written")
	}
	if q := b.sh.queued.Load(); q != 0 {
		t.Fatalf("Drain returned with %d bytes queued", q)
	}
	for _, c := range []struct {
		p    *rawPeer
		step int
	}{{onlyA, 2}, {all, 1}} {
		c.p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for i := 0; i < n; i += c.step {
			m, err := c.p.readMessage(true)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if len(m) != 2 || string(m[1]) != fmt.Sprint(i) {
				t.Fatalf("message %d: got %q", i, m)
			}
		}
	}
}

// TestDrainWaitsForTheReader: Drain reports false while a peer has not
// taken what was sent to it, and wakes as soon as it has.
func TestDrainWaitsForTheReader(t *testing.T) {
	b := bindDoor(t, "ROUTER", Limits{})
	p := dialRaw(t, b.addr)
	p.handshake("DEALER", []byte("slow"))
	testutil.WaitFor(t, 5*time.Second, "identity", func() bool { return routerEstablished(b.door, "slow") })
	big := bytes.Repeat([]byte{'x'}, 16<<20) // more than a peer that never reads lets the socket buffers take (about 4 MiB here: tcp_wmem max, the initial receive window)
	testutil.NoErr(t, b.door.Send([][]byte{[]byte("slow"), big}))
	if Drain(200*time.Millisecond, b.door) {
		t.Fatal("Drain said written while the peer reads nothing")
	}
	done := make(chan bool)
	go func() { done <- Drain(10*time.Second, b.door) }()
	p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	m, err := p.readMessage(true)
	if err != nil || len(m) != 1 || len(m[0]) != len(big) {
		t.Fatalf("got %d frames, %v", len(m), err)
	}
	if !<-done {
		t.Fatal("Drain timed out although the peer read everything")
	}
}

// TestLinkSend: a Link's Send waits for the connection zmq4 dials through
// it, then delivers to the kernel's side (a ROUTER, as ipykernel binds)
// byte for byte; the socket still receives through zmq4; a Send on a link
// whose context ended fails instead of waiting.
func TestLinkSend(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kernel := zmq4.NewRouter(ctx)
	defer kernel.Close()
	testutil.NoErr(t, kernel.Listen("tcp://127.0.0.1:0"))
	l := NewLink(ctx, "shell")
	sent := make(chan error, 1)
	big := bytes.Repeat([]byte("k"), 300<<10)
	go func() { sent <- l.Send([][]byte{[]byte("req"), big}) }()

	dealer := zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity("relay")))
	defer dealer.Close()
	ep, err := l.Endpoint("tcp://" + kernel.Addr().String())
	testutil.NoErr(t, err)
	testutil.NoErr(t, dealer.Dial(ep))
	testutil.NoErr(t, <-sent)
	m, err := recvWithin(t, kernel, 5*time.Second)
	testutil.NoErr(t, err)
	if len(m.Frames) != 3 || string(m.Frames[0]) != "relay" || string(m.Frames[1]) != "req" || !bytes.Equal(m.Frames[2], big) {
		t.Fatalf("kernel got %d frames", len(m.Frames))
	}
	testutil.NoErr(t, kernel.SendMulti(zmq4.NewMsgFrom([]byte("relay"), []byte("reply"))))
	r, err := recvWithin(t, dealer, 5*time.Second)
	if err != nil || len(r.Frames) != 1 || string(r.Frames[0]) != "reply" {
		t.Fatalf("dealer got %q, %v", r.Frames, err)
	}

	lctx, lcancel := context.WithCancel(context.Background())
	idle := NewLink(lctx, "control")
	lcancel()
	if err := idle.Send([][]byte{[]byte("x")}); err == nil {
		t.Fatal("Send on a link whose context ended succeeded")
	}
	if _, err := idle.Endpoint("udp://x"); err == nil {
		t.Fatal("a udp endpoint was taken")
	}
}

// routerEstablished reports whether id's connection is one zmq4 has done
// its handshake on: what Door.Send sends to.
func routerEstablished(d *Door, id string) bool {
	d.mu.Lock()
	c := d.ids[id]
	d.mu.Unlock()
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.established
}
