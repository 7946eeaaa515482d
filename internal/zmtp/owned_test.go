package zmtp

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
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
		testutil.WaitFor(t, 5*time.Second, id+" held by this peer", func() bool {
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
	testutil.WaitFor(t, 5*time.Second, "the claim after the reservation's end", func() bool {
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
	testutil.WaitFor(t, 5*time.Second, "the identity held", func() bool {
		return slices.Contains(sh.Owned(heldUntil), Owned{Socket: "shell", ID: "session-1", Peer: self(), Until: heldUntil})
	})
	anon := dialRaw(t, b.addr) // a random identity: nothing to carry
	anon.handshake("DEALER", nil)
	testutil.WaitFor(t, 5*time.Second, "two connections", func() bool { e, _ := b.door.Conns(); return e == 2 })

	before := time.Now()
	p.c.Close()
	expectChange("the last holder's close")
	testutil.WaitFor(t, 5*time.Second, "the identity kept", func() bool {
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
