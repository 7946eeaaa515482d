package zmtp

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Who owns which routing identity, across supervisors.
//
// A door refuses another peer's claim of an identity while its holder's
// connections hold it and for ReserveFor after the last of them closed
// (Door.claim). A kernel's restart ends the supervisor process, and the
// next one binds fresh doors about 100 ms before the clients' libzmq
// reconnects: any local user who read the identity off iopub (it is the
// session id) could claim it in that window, and take the client's
// replies and input_request (issue 32). So the stopping supervisor asks
// Owned what its doors know, and the next one hands it to Keep before it
// binds: its doors then refuse those claims exactly as the old ones would
// have. The wrapper carries it between the two (docs/local-peers.md).

// An Owned is one routing identity of a ROUTER door and the peer it
// belongs to: held by that peer's connections, or kept for their
// reconnect.
type Owned struct {
	Socket string    // the door's name, as given to Bind ("shell", "control", …)
	ID     string    // the identity the peer's client claimed
	Peer   string    // the peer: "uid:1000", or "addr:10.0.0.5" for a remote client
	Until  time.Time // until when another peer's claim of it is refused
}

// ownBook is the part of Shared that Keep, Owned and OwnedChanged use.
type ownBook struct {
	mu      sync.Mutex
	doors   []*Door            // the open ROUTER doors
	kept    map[string][]Owned // Keep's, by socket, until a door of that name is bound
	changed chan struct{}      // OwnedChanged's, one wake-up pending at most
}

// carried reports whether an identity can be carried to another process
// for peer: a connection's own key ("conn:N") names nobody there, and an
// identity that is empty or starts with a zero byte is never claimed (the
// door gives such clients a random one).
func carried(id, peer string) bool {
	return id != "" && id[0] != 0 && (strings.HasPrefix(peer, "uid:") || strings.HasPrefix(peer, "addr:"))
}

// Keep has the ROUTER door of each entry's Socket, bound with s after this
// call, refuse every other peer's claim of its ID until its Until, as if
// the holder's last connection had just closed there; a claim of the same
// peer takes the identity back. Entries that expired, that no door could
// hold (see carried), or past 4096 for one socket (the latest Until kept)
// are left out. Call it before Bind; a later call replaces what an
// earlier one left for doors not yet bound.
func (s *Shared) Keep(owned []Owned) {
	now := time.Now()
	by := map[string][]Owned{}
	for _, o := range owned {
		if carried(o.ID, o.Peer) && o.Until.After(now) {
			by[o.Socket] = append(by[o.Socket], o)
		}
	}
	for name, list := range by {
		if len(list) > maxReserved {
			slices.SortFunc(list, func(a, b Owned) int { return b.Until.Compare(a.Until) })
			by[name] = list[:maxReserved]
		}
	}
	s.own.mu.Lock()
	s.own.kept = by
	s.own.mu.Unlock()
}

// Owned returns the identities the open ROUTER doors of s hold now, with
// Until heldUntil, and those they keep for a holder's reconnect, with the
// reservation's end; expired reservations, and identities that cannot be
// carried to another process (a peer known only by its connection), are
// left out. It is what Keep takes.
func (s *Shared) Owned(heldUntil time.Time) []Owned {
	s.own.mu.Lock()
	doors := slices.Clone(s.own.doors)
	s.own.mu.Unlock()
	now := time.Now()
	var out []Owned
	for _, d := range doors { // each door's lock alone: Close takes s.own.mu under it
		d.mu.Lock()
		for id, h := range d.holders {
			if carried(id, h.peer) {
				out = append(out, Owned{Socket: d.name, ID: id, Peer: h.peer, Until: heldUntil})
			}
		}
		for id, r := range d.reserved {
			if carried(id, r.peer) && r.until.After(now) {
				out = append(out, Owned{Socket: d.name, ID: id, Peer: r.peer, Until: r.until})
			}
		}
		d.mu.Unlock()
	}
	return out
}

// OwnedChanged receives after a peer's client claims an identity no
// connection held on a door of s, or the last connection holding one
// closes: when the identities Owned returns as held change. A reservation
// running out is no change. At most one wake-up is pending, however many
// changes there were; the receiver reads Owned after it.
func (s *Shared) OwnedChanged() <-chan struct{} { return s.own.changed }

func (s *Shared) ownedChanged() {
	select {
	case s.own.changed <- struct{}{}:
	default:
	}
}

// adopt registers a new ROUTER door and seeds its reservations with what
// Keep left for its name.
func (s *Shared) adopt(d *Door) {
	s.own.mu.Lock()
	defer s.own.mu.Unlock()
	s.own.doors = append(s.own.doors, d)
	for _, o := range s.own.kept[d.name] {
		d.reserved[o.ID] = reservation{peer: o.Peer, until: o.Until}
	}
	delete(s.own.kept, d.name)
}

// disown forgets a door that closed (or never listened).
func (s *Shared) disown(d *Door) {
	s.own.mu.Lock()
	defer s.own.mu.Unlock()
	s.own.doors = slices.DeleteFunc(s.own.doors, func(x *Door) bool { return x == d })
}
