package zmtp

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// bindShell binds a ROUTER door named "shell" with sh.
func bindShell(t *testing.T, sh *Shared) *bound {
	t.Helper()
	return bindWith(t, "ROUTER", "shell", sh, false)
}

// self is this test's peer key, as a door sees its connections.
func self() string { return "uid:" + strconv.Itoa(os.Geteuid()) }

// owned is the entry of Owned for socket and id, if any.
func owned(sh *Shared, socket, id string) (Owned, bool) {
	for _, o := range sh.Owned(time.Now().Add(time.Hour)) {
		if o.Socket == socket && o.ID == id {
			return o, true
		}
	}
	return Owned{}, false
}

// What a previous supervisor's doors knew (Keep, before Bind) is what the
// new door refuses: another peer's claim of an identity kept for uid A is
// closed at once, A's own claim takes it back; what expired, what names a
// peer known only by its connection, and what belongs to another socket
// do not bind this door.
func TestKeptIdentityIsRefusedToOtherPeers(t *testing.T) {
	other := "uid:4242" // not this process's: its claims come from self()
	if self() == other {
		t.Skip("runs as uid 4242")
	}
	now := time.Now()
	sh := NewShared(Limits{}, nil)
	sh.Keep([]Owned{
		{Socket: "shell", ID: "bobs-session", Peer: other, Until: now.Add(time.Minute)},
		{Socket: "shell", ID: "mine", Peer: self(), Until: now.Add(time.Minute)},
		{Socket: "shell", ID: "expired", Peer: other, Until: now.Add(-time.Second)},
		{Socket: "shell", ID: "a-connection", Peer: "conn:7", Until: now.Add(time.Minute)},
		{Socket: "shell", ID: "\x00libzmq", Peer: other, Until: now.Add(time.Minute)},
		{Socket: "control", ID: "on-control", Peer: other, Until: now.Add(time.Minute)},
	})
	b := bindShell(t, sh)

	thief := dialRaw(t, b.addr)
	thief.handshake("DEALER", []byte("bobs-session"))
	if !thief.closedWithin(5 * time.Second) {
		t.Fatal("another peer's claim of a kept identity was not refused")
	}
	if o, ok := owned(sh, "shell", "bobs-session"); !ok || o.Peer != other || o.Until.Sub(now) != time.Minute {
		t.Errorf("the kept identity is %+v (%v) after the refusal; want it still %s's, until as kept", o, ok, other)
	}
	for _, id := range []string{"mine", "expired", "a-connection", "on-control"} {
		p := dialRaw(t, b.addr)
		p.handshake("DEALER", []byte(id))
		waitFor(t, id+" held by this peer", func() bool {
			o, ok := owned(sh, "shell", id)
			return ok && o.Peer == self() && o.Until.After(now.Add(time.Minute))
		})
	}
	// The control entry waits for a door of that name; this one never
	// kept it (its claim above was taken).
	if _, ok := sh.own.kept["control"]; !ok {
		t.Error("an entry for another socket was dropped before its door was bound")
	}
}

// A kept identity is free for anyone once its Until has passed.
func TestKeptIdentityExpires(t *testing.T) {
	until := time.Now().Add(300 * time.Millisecond)
	sh := NewShared(Limits{}, nil)
	sh.Keep([]Owned{{Socket: "shell", ID: "short", Peer: "uid:4242", Until: until}})
	b := bindShell(t, sh)
	early := dialRaw(t, b.addr)
	early.handshake("DEALER", []byte("short"))
	if !early.closedWithin(5 * time.Second) {
		t.Fatal("a claim before the reservation's end was not refused")
	}
	for time.Now().Before(until.Add(time.Millisecond)) { // the event: the clock past Until
		time.Sleep(until.Sub(time.Now()) + time.Millisecond)
	}
	late := dialRaw(t, b.addr)
	late.handshake("DEALER", []byte("short"))
	waitFor(t, "the claim after the reservation's end", func() bool {
		o, ok := owned(sh, "shell", "short")
		return ok && o.Peer == self()
	})
}

// OwnedChanged wakes on a first claim and on the last holder's close; the
// closed identity is then reported as kept for ReserveFor.
func TestOwnedChangedAndReported(t *testing.T) {
	sh := NewShared(Limits{}, nil)
	b := bindShell(t, sh)
	expectChange := func(what string) {
		t.Helper()
		select {
		case <-sh.OwnedChanged():
		case <-time.After(5 * time.Second):
			t.Fatalf("no change reported after %s", what)
		}
	}
	p := dialRaw(t, b.addr)
	p.handshake("DEALER", []byte("session-1"))
	expectChange("a first claim")
	heldUntil := time.Now().Add(time.Hour)
	waitFor(t, "the identity held", func() bool {
		return slices.Contains(sh.Owned(heldUntil), Owned{Socket: "shell", ID: "session-1", Peer: self(), Until: heldUntil})
	})
	anon := dialRaw(t, b.addr) // a random identity: nothing to carry
	anon.handshake("DEALER", nil)
	waitFor(t, "two connections", func() bool { e, _ := b.door.Conns(); return e == 2 })

	before := time.Now()
	p.c.Close()
	expectChange("the last holder's close")
	waitFor(t, "the identity kept", func() bool {
		o, ok := owned(sh, "shell", "session-1")
		return ok && o.Until.Before(time.Now().Add(time.Minute)) // kept, no longer held
	})
	o, _ := owned(sh, "shell", "session-1")
	if o.Until.Before(before.Add(ReserveFor)) || o.Until.After(time.Now().Add(ReserveFor)) {
		t.Errorf("kept until %v, want ReserveFor after the close (%v)", o.Until, before.Add(ReserveFor))
	}
	if got := len(sh.Owned(heldUntil)); got != 1 {
		t.Errorf("Owned reports %d identities, want the one kept: %+v", got, sh.Owned(heldUntil))
	}
	b.door.Close()
	if got := sh.Owned(heldUntil); len(got) != 0 {
		t.Errorf("a closed door still reports %+v", got)
	}
}

// Keep holds at most maxReserved identities per socket, the latest Until
// first, whatever it is given.
func TestKeepIsBounded(t *testing.T) {
	now := time.Now()
	var many []Owned
	for i := range maxReserved + 100 {
		many = append(many, Owned{Socket: "shell", ID: fmt.Sprintf("id-%d", i), Peer: "uid:4242",
			Until: now.Add(time.Minute + time.Duration(i)*time.Millisecond)})
	}
	sh := NewShared(Limits{}, nil)
	sh.Keep(many)
	bindShell(t, sh)
	got := sh.Owned(now)
	if len(got) != maxReserved {
		t.Fatalf("the door keeps %d identities, want %d", len(got), maxReserved)
	}
	for _, o := range got {
		if o.Until.Before(many[100].Until) {
			t.Fatalf("kept %s (until %v), dropped a later one", o.ID, o.Until)
		}
	}
}

// A client is "returning" when it claims an identity kept for its own
// peer, from the previous supervisor (Keep) or from its own dropped
// connection; a fresh identity, a random one and another peer's are not.
// The PUB door tells when a connection of a peer subscribes
// (WaitSubscriber), so that the relay can hold a returning client's first
// request until the client's SUB is back (wrapper/relay.ReturnHold).
func TestReturningClientAndItsSubscription(t *testing.T) {
	sh := NewShared(Limits{}, nil)
	sh.Keep([]Owned{{Socket: "shell", ID: "kept", Peer: self(), Until: time.Now().Add(time.Minute)}})
	shell := bindShell(t, sh)
	iopub := bindWith(t, "PUB", "iopub", sh, true)

	back := dialRaw(t, shell.addr)
	back.handshake("DEALER", []byte("kept"))
	fresh := dialRaw(t, shell.addr)
	fresh.handshake("DEALER", []byte("fresh"))
	waitFor(t, "two connections", func() bool { e, _ := shell.door.Conns(); return e == 2 })
	if peer, ok := shell.door.Returning([]byte("kept")); !ok || peer != self() {
		t.Errorf("Returning(kept) = %q, %v; want %q, true (an identity the previous supervisor kept for this peer)", peer, ok, self())
	}
	if peer, ok := shell.door.Returning([]byte("fresh")); ok {
		t.Errorf("Returning(fresh) = %q, true; a first claim is no returning client", peer)
	}
	if _, ok := shell.door.Returning([]byte("nobody")); ok {
		t.Error("Returning of an identity no connection holds")
	}

	// Its own reconnect within one supervisor returns too.
	fresh.c.Close()
	waitFor(t, "the fresh identity kept", func() bool {
		o, ok := owned(sh, "shell", "fresh")
		return ok && o.Until.Before(time.Now().Add(time.Minute))
	})
	again := dialRaw(t, shell.addr)
	again.handshake("DEALER", []byte("fresh"))
	waitFor(t, "the reconnect held", func() bool { _, ok := shell.door.Returning([]byte("fresh")); return ok })

	// No subscriber yet: the wait ends with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if iopub.door.WaitSubscriber(ctx, self()) {
		t.Error("WaitSubscriber reported a subscriber before any connected")
	}
	cancel()
	// Another peer's subscription does not end this peer's wait; the
	// peer's own does, whenever it comes.
	done := make(chan bool, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done <- iopub.door.WaitSubscriber(ctx, self())
	}()
	iopub.door.peerSubscribed("uid:4242", 1) // as a connection of that peer would
	select {
	case <-done:
		t.Fatal("another peer's subscription ended the wait")
	case <-time.After(100 * time.Millisecond):
	}
	sub := dialRaw(t, iopub.addr)
	sub.handshake("SUB", nil)
	sub.send(AppendCommand(nil, "SUBSCRIBE", nil))
	if !<-done {
		t.Fatal("WaitSubscriber did not report the peer's subscription")
	}
	// Once the last subscriber is gone, a new wait waits again.
	sub.c.Close()
	waitFor(t, "the subscriber gone", func() bool {
		iopub.door.mu.Lock()
		defer iopub.door.mu.Unlock()
		return iopub.door.subPeers[self()] == 0
	})
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if iopub.door.WaitSubscriber(ctx, self()) {
		t.Error("WaitSubscriber reported a subscriber that left")
	}
}
