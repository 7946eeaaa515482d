package zmtp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Class 1 of docs/security.md#threats: no keyless peer can deny service or
// take a reply. The attacks run as a real other user (attacker_test.go);
// the victim is this process, the doors' owner, with zmq4's DEALER and SUB
// (a real ZMTP client library).

// echoRouter answers every message on a ROUTER door with the same frames,
// sent through the door as the relay sends.
func echoRouter(t *testing.T, b *bound) {
	go func() {
		for {
			m, err := b.sock.Recv()
			if err != nil {
				return
			}
			if m.Type == zmq4.CmdMsg || len(m.Frames) < 2 {
				continue
			}
			b.door.Send(m.Frames)
		}
	}()
}

// victim is a client of the doors' owner doing round trips through an
// echoing ROUTER door.
type victim struct {
	t    *testing.T
	sock zmq4.Socket
	got  chan []byte
}

func newVictim(t *testing.T, b *bound, id string) *victim {
	t.Helper()
	v := &victim{t: t, sock: zmqClient(t, zmq4.Dealer, b.addr, zmq4.WithID(zmq4.SocketIdentity(id))), got: make(chan []byte, 16)}
	go func() {
		for {
			m, err := v.sock.Recv()
			if err != nil {
				close(v.got)
				return
			}
			if len(m.Frames) == 1 {
				v.got <- m.Frames[0]
			}
		}
	}()
	testutil.WaitFor(t, 5*time.Second, "the victim's connection", func() bool {
		b.door.mu.Lock()
		defer b.door.mu.Unlock()
		return b.door.ids[id] != nil
	})
	return v
}

// roundTrip sends payload and waits for its echo, at most within: the
// bound a real client's round trips must keep (a liveness bound, far above
// the milliseconds they take; not a performance figure).
func (v *victim) roundTrip(payload []byte, within time.Duration) error {
	if err := v.sock.Send(zmq4.NewMsg(payload)); err != nil {
		return err
	}
	deadline := time.After(within)
	for {
		select {
		case m, ok := <-v.got:
			if !ok {
				return fmt.Errorf("the victim's socket closed")
			}
			if bytes.Equal(m, payload) {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("no echo of %d bytes within %v", len(payload), within)
		}
	}
}

// The property: while many adversarial connections of another user run
// at once (budget fillers, tricklers, claimers of the victim's identity,
// silent handshakes, idle floods, garbage), each of a real client's round
// trips completes within the bound, and nothing routed to the victim's
// identity reaches the attacker. Seeds vary the mix; TFGPU_CHAOS_SEEDS
// runs more of them.
func TestKeylessPeersCannotDenyService(t *testing.T) {
	u := testutil.NewUser(t, "chaos", nil)
	seeds := 2
	if s := os.Getenv("TFGPU_CHAOS_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	base := uint64(time.Now().UnixNano())
	for i := range seeds {
		seed := base + uint64(i)
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			lim := Limits{MaxMessage: 16 << 20, MaxConns: 48, MaxHandshakes: 12, HandshakeTimeout: 2 * time.Second,
				MessageIdle: time.Second}
			b := bindDoor(t, "ROUTER", lim)
			echoRouter(t, b)
			id := randomID()
			v := newVictim(t, b, id)
			a := startAttack(t, u, "chaos", b.addr, strconv.FormatUint(seed, 10), id)
			rng := mrand.New(mrand.NewPCG(seed, 2))
			end := time.Now().Add(6 * time.Second)
			n := 0
			for time.Now().Before(end) {
				size := 1 + rng.IntN(2<<20)
				p := bytes.Repeat([]byte{byte('a' + n%26)}, size)
				if err := v.roundTrip(p, 5*time.Second); err != nil {
					t.Fatalf("round trip %d during the attack: %v\nattack so far:\n%s", n, err, a.out.String())
				}
				n++
			}
			out := a.stop(t)
			t.Logf("%d round trips during the attack; attacker: %s", n, strings.Join(strings.Fields(out), " "))
			if got := attackCount(out, "got"); got != 0 {
				t.Errorf("the attacker received %d frames routed to the victim's identity", got)
			}
			if attackCount(out, "held") == 0 {
				t.Errorf("the attack never held an unfinished message: it tested nothing\n%s", out)
			}
		})
	}
}

// Attack A: another user fills the receive budget with unfinished
// messages; the victim's next large message makes the largest of them go,
// not the victim.
func TestReceiveBudgetGoesAgainstTheLargest(t *testing.T) {
	u := testutil.NewUser(t, "fill", nil)
	b := bindDoor(t, "ROUTER", Limits{MaxMessage: 8 << 20}) // budget: 72 MiB
	echoRouter(t, b)
	v := newVictim(t, b, randomID())
	// 10 connections × 8 MiB declared, all but a byte sent: 80 MiB > 72.
	a := startAttack(t, u, "fill", b.addr, "10", strconv.Itoa(8<<20))
	testutil.WaitFor(t, 5*time.Second, "the budget filled", func() bool { return b.sh.receiving.Load() > 56<<20 })
	for i := range 5 {
		if err := v.roundTrip(bytes.Repeat([]byte("v"), 6<<20), 10*time.Second); err != nil {
			t.Fatalf("round trip %d: %v (receiving %d)", i, err, b.sh.receiving.Load())
		}
	}
	out := a.stop(t)
	t.Logf("attacker: %s", strings.Join(strings.Fields(out), " "))
	if attackCount(out, "closed") == 0 {
		t.Errorf("no attacker connection was closed: the budget was never full?\n%s", out)
	}
}

// The book keeping behind it: at the line, the peer with the most loses
// its largest connection, repeatedly; the one that crosses the line keeps
// going unless it is the largest.
func TestReceiveBudgetFairness(t *testing.T) {
	sh := NewShared(Limits{MaxMessage: 1 << 20}, nil) // budget 65 MiB
	var closed []string
	acct := func(peer, name string) *recvAcct {
		a := &recvAcct{peer: peer, name: name}
		a.close = func() { closed = append(closed, name) }
		sh.register(a)
		return a
	}
	m1, m2, m3 := acct("uid:1001", "m1"), acct("uid:1001", "m2"), acct("uid:1001", "m3")
	v := acct("uid:1000", "victim")
	for _, a := range []*recvAcct{m1, m2, m3} {
		testutil.NoErr(t, sh.take(a, 20<<20))
	}
	if err := sh.take(m1, 1<<20); err != nil { // m1 is now the largest of the largest peer
		t.Fatal(err)
	}
	if err := sh.take(v, 4<<20); err != nil { // 61+4 = 65 MiB: at the line, not past it
		t.Fatal(err)
	}
	if len(closed) != 0 {
		t.Fatalf("closed %v at the line", closed)
	}
	if err := sh.take(v, 1); err != nil {
		t.Fatalf("the victim crossing the line lost: %v", err)
	}
	if len(closed) != 1 || closed[0] != "m1" {
		t.Fatalf("closed %v, want [m1] (the largest connection of the largest peer)", closed)
	}
	if err := sh.take(m1, 1); err == nil {
		t.Fatal("an evicted connection could take more")
	}
	sh.give(m1, 21<<20) // its reader gives back: nothing, it was taken already
	if got, want := sh.receiving.Load(), int64(40<<20+4<<20+1); got != want {
		t.Fatalf("receiving %d, want %d", got, want)
	}
	// The largest crossing the line itself loses, and nobody else does.
	if err := sh.take(m2, 30<<20); err == nil {
		t.Fatal("the largest connection crossed the line and kept going")
	}
	if len(closed) != 1 {
		t.Fatalf("closed %v", closed)
	}
}

// An unfinished message has a deadline: silence in the middle of one, or
// a trickle, closes the connection; silence between messages does not.
func TestUnfinishedMessageDeadline(t *testing.T) {
	b := bindDoor(t, "ROUTER", Limits{MessageIdle: 300 * time.Millisecond})
	stalled := dialRaw(t, b.addr)
	stalled.handshake("DEALER", nil)
	stalled.send(append(AppendFrameHeader(nil, 0, 1<<20), make([]byte, 100)...))
	multi := dialRaw(t, b.addr)
	multi.handshake("DEALER", nil)
	first := message([]byte("a"), []byte("b"))
	multi.send(first[:3]) // a first frame with MORE, then nothing
	trickler := dialRaw(t, b.addr)
	trickler.handshake("DEALER", nil)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a byte every 200 ms of a 1 MiB frame: never idle, far too slow
		trickler.send(AppendFrameHeader(nil, 0, 1<<20))
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				if trickler.send([]byte{0}) != nil {
					return
				}
			}
		}
	}()
	idle := dialRaw(t, b.addr)
	idle.handshake("DEALER", nil)
	idle.send(message([]byte("whole")))
	for name, p := range map[string]*rawPeer{"silent mid-frame": stalled, "silent mid-message": multi, "trickling": trickler} {
		if !p.closedWithin(5 * time.Second) {
			t.Errorf("%s: the connection was kept", name)
		}
	}
	if idle.closedWithin(500 * time.Millisecond) {
		t.Error("a connection idle between messages was closed")
	}
	if r := b.sh.receiving.Load(); r != 0 {
		testutil.WaitFor(t, 5*time.Second, "the budget given back", func() bool { return b.sh.receiving.Load() == 0 })
	}
}

// Attack B: another user hammers a client's identity (read off iopub).
// While the client holds it the claims are refused without a probe; when
// its connection drops, the identity waits for its own reconnect; the
// attacker never gets a frame routed to it, and the client gets its
// replies after reconnecting.
func TestIdentityStaysWithItsPeer(t *testing.T) {
	u := testutil.NewUser(t, "claim", nil)
	b := bindDoor(t, "ROUTER", Limits{})
	id := randomID()
	holder := dialRaw(t, b.addr)
	holder.handshake("DEALER", []byte(id))
	pings := &atomic.Int64{}
	go func() { // the holder answers PINGs and counts them
		for {
			h, body, err := holder.readFrame()
			if err != nil {
				return
			}
			if h.Command() {
				if name, data, _ := ParseCommand(body); name == "PING" {
					pings.Add(1)
					ping, _ := ParsePing(data)
					holder.send(AppendCommand(nil, "PONG", ping.Context))
				}
			}
		}
	}()
	testutil.WaitFor(t, 5*time.Second, "the holder", func() bool { e, _ := b.door.Conns(); return e == 1 })
	a := startAttack(t, u, "claim", b.addr, id)
	time.Sleep(500 * time.Millisecond) // the attacker hammers meanwhile
	if n := pings.Load(); n != 0 {
		t.Errorf("another user's claims made the door probe the holder %d times", n)
	}
	// The holder's connection drops (attack A did this before), and its
	// client reconnects a little later, as libzmq does.
	holder.c.Close()
	time.Sleep(300 * time.Millisecond) // the attacker races all this while
	back := dialRaw(t, b.addr)
	back.handshake("DEALER", []byte(id))
	backGot := pongingPeer(back)
	deadline := time.After(5 * time.Second)
	for done := false; !done; {
		b.door.Send([][]byte{[]byte(id), []byte("execute_reply with the secret")})
		select {
		case m := <-backGot:
			if string(m[0]) != "execute_reply with the secret" {
				t.Fatalf("the client got %q", m)
			}
			done = true
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("the reconnected client got nothing")
		}
	}
	out := a.stop(t)
	t.Logf("attacker: %s", strings.Join(strings.Fields(out), " "))
	if got := attackCount(out, "got"); got != 0 {
		t.Errorf("the attacker received %d frames routed to the client's identity", got)
	}
	if attackCount(out, "claimed") != 0 {
		t.Errorf("the attacker's claim was accepted (%d times)", attackCount(out, "claimed"))
	}
	if attackCount(out, "refused") == 0 {
		t.Errorf("the attacker never claimed: it tested nothing\n%s", out)
	}
}

// Connections of one user flooding a door up to its cap make room for
// another user's client: the flooder's newest goes.
func TestConnectionCapIsPerPeer(t *testing.T) {
	u := testutil.NewUser(t, "flood", nil)
	b := bindDoor(t, "ROUTER", Limits{MaxConns: 16, MaxHandshakes: 8})
	echoRouter(t, b)
	a := startAttack(t, u, "flood", b.addr, "24") // more than the cap, reconnecting
	testutil.WaitFor(t, 5*time.Second, "the door full", func() bool { e, h := b.door.Conns(); return e+h >= 16 })
	v := newVictim(t, b, randomID())
	testutil.NoErr(t, v.roundTrip([]byte("hello"), 5*time.Second))
	out := a.stop(t)
	if attackCount(out, "closed")+attackCount(out, "refused") == 0 {
		t.Errorf("the flood was never turned away:\n%s", out)
	}
}

// Attack G: another user's subscriber that reads just fast enough never
// holds iopub's writer up (it misses messages instead); the owner's own
// lagging subscriber holds it for at most HoldFor, then misses messages
// until it catches up; and a message sent while the writer is held (the
// supervisor's own) does not wait for the hold.
func TestIopubHoldIsTheOwnersAndBounded(t *testing.T) {
	u := testutil.NewUser(t, "slowsub", nil)
	lim := Limits{QueueLimit: 1 << 20, HardLimit: 16 << 20, HoldFor: 300 * time.Millisecond, StallAfter: 200 * time.Millisecond}
	bindPub := func(lim Limits) *bound {
		return noReplay(bindWith(t, "PUB", "iopub", NewShared(lim, nil), true)) // a late subscriber gets what follows only
	}
	body := bytes.Repeat([]byte("o"), 64<<10)
	publish := func(b *bound, n int) (waited int) {
		for range n {
			b.door.mu.Lock()
			if b.door.heldN > 0 {
				waited++
			}
			b.door.mu.Unlock()
			b.door.WaitRoom(context.Background())
			b.door.Send([][]byte{body})
		}
		return waited
	}
	fastSub := func(b *bound) *atomic.Int64 {
		got := &atomic.Int64{}
		s := zmqClient(t, zmq4.Sub, b.addr)
		go func() {
			for {
				if _, err := s.Recv(); err != nil {
					return
				}
				got.Add(1)
			}
		}()
		return got
	}
	subscribed := func(b *bound, n int) {
		testutil.WaitFor(t, 5*time.Second, "subscribers", func() bool {
			b.door.mu.Lock()
			defer b.door.mu.Unlock()
			return len(b.door.conns) == n && b.door.topics[""] == n
		})
	}

	t.Run("another user's", func(t *testing.T) {
		// Alone on the door: any hold would be the attacker's (the owner's
		// own fast reader may lag a moment and hold, as it may).
		b := bindPub(lim)
		a := startAttack(t, u, "slowsub", b.addr, strconv.Itoa(256<<10)) // 256 KiB/s
		subscribed(b, 1)
		waited := publish(b, 400) // 25 MiB
		owner := fastSub(b)       // and then the owner's client still gets what follows
		subscribed(b, 2)
		for range 10 {
			b.door.Send([][]byte{body})
		}
		testutil.WaitFor(t, 5*time.Second, "the owner's client got what followed", func() bool { return owner.Load() == 10 })
		out := a.stop(t)
		got := attackCount(out, "bytes")
		t.Logf("the slow subscriber read %d bytes of %d sent; the writer waited before %d messages", got, 400*len(body), waited)
		if waited != 0 {
			t.Errorf("another user's subscriber held the writer up before %d messages", waited)
		}
		if got >= int64(400*len(body)) {
			t.Errorf("the slow subscriber missed nothing (%d bytes): it held the writer", got)
		}
	})

	t.Run("the owner's", func(t *testing.T) {
		b := bindPub(lim)
		slow := dialRaw(t, b.addr)
		slow.handshake("SUB", nil)
		slow.send(message([]byte("\x01")))
		subscribed(b, 1)
		read := &atomic.Int64{}
		stop := make(chan struct{})
		defer close(stop)
		go func() { // 256 KiB/s, never stalled
			buf := make([]byte, 12<<10)
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				n, err := io.ReadFull(slow.r, buf)
				read.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
		publishing := make(chan int)
		go func() { publishing <- publish(b, 200) }() // 12.5 MiB
		var waited int
		select {
		case waited = <-publishing:
		case <-time.After(60 * time.Second):
			t.Fatal("publishing 12.5 MiB to a lagging subscriber never ended: the hold is unbounded")
		}
		t.Logf("the writer waited before %d of 200 messages; the slow subscriber read %d bytes; %d messages dropped", waited, read.Load(), b.sh.Dropped())
		if waited == 0 {
			t.Error("the owner's lagging subscriber never held the writer")
		}
		if b.sh.Dropped() == 0 {
			t.Error("the owner's subscriber lagged past its hold and missed nothing: the hold was not bounded")
		}
	})

	t.Run("own messages", func(t *testing.T) {
		lim := lim
		lim.HoldFor, lim.StallAfter = time.Minute, time.Minute
		b := bindPub(lim)
		stuck := dialRaw(t, b.addr) // the owner's, and it stops reading
		stuck.handshake("SUB", nil)
		stuck.send(message([]byte("\x01")))
		subscribed(b, 1)
		for !func() bool { b.door.mu.Lock(); defer b.door.mu.Unlock(); return b.door.heldN > 0 }() {
			b.door.Send([][]byte{body}) // until its queue is past QueueLimit
		}
		waiting := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { b.door.WaitRoom(ctx); close(waiting) }()
		b.door.Send([][]byte{[]byte("the supervisor's own status")})
		b.door.mu.Lock()
		held := b.door.heldN
		b.door.mu.Unlock()
		select {
		case <-waiting:
			t.Fatal("WaitRoom returned while the writer was held")
		default:
		}
		cancel()
		<-waiting
		if held == 0 {
			t.Fatal("the supervisor's own message waited for the hold to end")
		}
	})
}
