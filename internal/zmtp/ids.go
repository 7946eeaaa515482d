package zmtp

import (
	"crypto/rand"
	"time"
)

// Routing identities and their slots on a ROUTER door: claims, refusal of
// another peer's claim, slots, and reservations for a holder's reconnect.

// claim gives c its routing identity. An empty one, or one starting with a
// zero byte (libzmq reserves those for identities it makes up), is replaced
// by a random one.
//
// An identity belongs to the peer (the user, see peer) whose connections
// hold it, and for ReserveFor after the last of them closes, to its
// reconnect: a claim from another peer is refused at once, so no other user
// can take a client's replies, whether it races the client's reconnect or
// not (attack B; ipykernel's ROUTER_HANDOVER would hand them over, and any
// local user reads the identities off iopub).
//
// The holder's own peer may hold it on several connections at once: two
// clients of one session (jupyter_client's KernelManager.client() called
// twice gives both the session's identity), or a client reconnecting while
// its old connection is not yet seen closed. Each such connection is a
// slot of the identity: slot 0 routes by the identity itself, slot k by
// slotID(identity, k), which Door.Recv gives as that connection's identity,
// so the kernel's replies go back to the connection that sent the request
// and never to the other (docs/design.md#routing-identities). A client
// connects its channels together, so its slots agree across the doors;
// where they do not, stdin falls back to the identity's lowest slot (see
// Send).
func (d *Door) claim(c *conn, id []byte) error {
	if len(id) == 0 || id[0] == 0 {
		var b [9]byte
		for b[1] == 0 || b[1] == slotMark {
			_, _ = rand.Read(b[1:])
		}
		c.identity = string(b[:])
		d.mu.Lock()
		d.ids[c.identity] = c
		d.mu.Unlock()
		return nil
	}
	key := string(id)
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.reserved[key]; ok {
		if r.peer != c.peer.key && time.Now().Before(r.until) {
			d.sh.rl.warn("zmtp: refused a connection claiming the identity of a client that is reconnecting",
				"socket", d.name, "peer", c.RemoteAddr().String(), "who", c.peer.key, "holder", r.peer)
			return protoErr("identity reserved for its holder's reconnect")
		}
		delete(d.reserved, key)
	}
	h := d.holders[key]
	switch {
	case h.n > 0 && h.peer != c.peer.key:
		d.sh.rl.warn("zmtp: refused a connection claiming the identity of another peer's client",
			"socket", d.name, "peer", c.RemoteAddr().String(), "who", c.peer.key, "holder", h.peer)
		return protoErr("identity held by another peer's client")
	case h.n >= maxSlots:
		d.sh.rl.warn("zmtp: refused a connection: its identity is held by too many connections",
			"socket", d.name, "peer", c.RemoteAddr().String(), "connections", h.n)
		return protoErr("identity held by %d connections", h.n)
	}
	for k := range maxSlots {
		sid := slotID(key, k)
		if d.ids[sid] == nil {
			d.ids[sid] = c
			c.identity, c.claimed = sid, key
			if d.holders == nil {
				d.holders = map[string]holder{}
			}
			d.holders[key] = holder{peer: c.peer.key, n: h.n + 1}
			if h.n == 0 {
				d.sh.ownedChanged()
			}
			return nil
		}
	}
	return protoErr("identity held by %d connections", h.n) // not reached: n < maxSlots
}

// holder is who holds a claimed identity, on how many connections.
type holder struct {
	peer string
	n    int
}

// maxSlots bounds the connections of one peer holding one identity.
const maxSlots = 64

// slotMark is the second byte of a slot's routing identity (after the
// zero byte no client may claim); random identities never have it.
const slotMark = 0xFE

// slotID is the routing identity of slot k of identity id: id itself for
// slot 0, else a zero byte, slotMark, k, id; no client can claim it.
func slotID(id string, k int) string {
	if k == 0 {
		return id
	}
	return string([]byte{0, slotMark, byte(k)}) + id
}

// claimedOf is the identity a client claimed, from a routing identity
// (slot 0's or slot k's); "" for a random one.
func claimedOf(rid string) string {
	switch {
	case rid == "":
		return ""
	case rid[0] != 0:
		return rid
	case len(rid) > 3 && rid[1] == slotMark:
		return rid[3:]
	}
	return ""
}

// A reservation keeps an identity whose connection closed for a reconnect
// from the same peer.
type reservation struct {
	peer  string
	until time.Time
}

// ReserveFor is how long an identity waits for its holder's reconnect
// (libzmq reconnects after 100 ms), within one supervisor and, through
// [Shared.Keep], across its restart; maxReserved bounds the reservations
// of one door, so that a peer making up identities cannot grow the map.
const (
	ReserveFor  = 30 * time.Second
	maxReserved = 4096
)

// forget removes a closed conn from the door, keeping its identity for its
// reconnect.
func (d *Door) forget(c *conn, subs map[string]int) {
	d.mu.Lock()
	if _, ok := d.conns[c]; ok {
		delete(d.conns, c)
		d.sh.conns.Add(-1)
	}
	if c.identity != "" && d.ids[c.identity] == c {
		delete(d.ids, c.identity)
		if c.claimed != "" {
			if h := d.holders[c.claimed]; h.n > 1 {
				d.holders[c.claimed] = holder{peer: h.peer, n: h.n - 1}
			} else {
				delete(d.holders, c.claimed)
				d.reserveLocked(c.claimed, c.peer.key, time.Now().Add(ReserveFor))
				d.sh.ownedChanged()
			}
		}
	}
	d.mu.Unlock()
	for t := range subs {
		d.topic(t, -1)
	}
}

// reserveLocked keeps id for peer until until. Past maxReserved, expired
// reservations go, then those of the peer with the most. Called with d.mu
// held.
func (d *Door) reserveLocked(id, peer string, until time.Time) {
	now := time.Now()
	if d.reserved == nil {
		d.reserved = map[string]reservation{}
	}
	if len(d.reserved) >= maxReserved {
		byPeer := map[string]int{}
		for k, r := range d.reserved {
			if now.After(r.until) {
				delete(d.reserved, k)
			} else {
				byPeer[r.peer]++
			}
		}
		if len(d.reserved) >= maxReserved {
			top, most := peer, byPeer[peer]
			for p, n := range byPeer {
				if n > most {
					top, most = p, n
				}
			}
			for k, r := range d.reserved {
				if r.peer == top {
					delete(d.reserved, k)
				}
			}
		}
	}
	d.reserved[id] = reservation{peer: peer, until: until}
}
