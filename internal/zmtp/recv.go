package zmtp

import (
	"io"
	"net"
	"sync"
	"time"
)

// The receive budget: how many bytes of inbound messages not yet complete
// all the connections of one relay together may make the supervisor hold
// (Shared.receiveBudget). It is shared fairly: when a connection's next
// bytes would pass it, the peer holding the most loses its largest
// connection, and so on until the bytes fit; the connection that happens
// to cross the line keeps going unless it is itself the largest holder.
// So a peer without the key that fills the budget with unfinished
// messages costs itself its connections, never a client its message
// (docs/security.md#keyless-peers, attack A).

// recvAcct is one connection's part of the receive budget.
type recvAcct struct {
	peer    string
	name    string    // the socket, for logs
	addr    string    // the peer's address, for logs
	close   func()    // closes the connection: its reader fails and lets go
	held    int64     // bytes counted now; under Shared.recvMu
	evicted bool      // closed by the budget (or closed): takes fail, gives are no-ops
	since   time.Time // registered, for the choice among equals
}

type recvBook struct {
	mu    sync.Mutex
	accts map[*recvAcct]struct{}
}

// register adds a connection to the budget's book.
func (s *Shared) register(a *recvAcct) {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if s.recv.accts == nil {
		s.recv.accts = map[*recvAcct]struct{}{}
	}
	a.since = time.Now()
	s.recv.accts[a] = struct{}{}
}

// unregister takes a closed connection out of the book and gives back
// what it held (its reader may still hold the bytes a moment: they are
// garbage from now on).
func (s *Shared) unregister(a *recvAcct) {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	s.receiving.Add(-a.held)
	a.held, a.evicted = 0, true
	delete(s.recv.accts, a)
}

// take counts n more bytes for a. Past the budget the largest holder of
// the largest peer is closed, repeatedly, until n fits; if that holder is
// a itself, take fails and a's reader gives its bytes back.
func (s *Shared) take(a *recvAcct, n int64) error {
	var victims []*recvAcct
	defer func() {
		for _, v := range victims {
			s.rl.warn("zmtp: closed the connection holding the most of the receive budget",
				"socket", v.name, "peer", v.addr, "who", v.peer, "budget", s.receiveBudget())
			v.close()
		}
	}()
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if a == nil { // a reader tested alone: the total only
		if s.receiving.Add(n) > s.receiveBudget() {
			return protoErr("inbound messages of all clients over %d bytes", s.receiveBudget())
		}
		return nil
	}
	if a.evicted {
		return protoErr("closed: inbound messages of all clients over %d bytes, this peer's the largest", s.receiveBudget())
	}
	a.held += n
	total := s.receiving.Add(n)
	for total > s.receiveBudget() {
		v := s.largestLocked()
		if v == nil || v == a {
			return protoErr("inbound messages of all clients over %d bytes, this peer's the largest", s.receiveBudget())
		}
		total = s.receiving.Add(-v.held)
		v.held, v.evicted = 0, true
		victims = append(victims, v)
	}
	return nil
}

// give gives back n bytes a counted (at most what it holds: nothing after
// an eviction).
func (s *Shared) give(a *recvAcct, n int64) {
	if n <= 0 {
		return
	}
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if a == nil {
		s.receiving.Add(-n)
		return
	}
	n = min(n, a.held)
	a.held -= n
	s.receiving.Add(-n)
}

// largestLocked is the connection holding the most among those of the
// peer holding the most (the newer of equals: an established client
// outlives a flood that copies its size). Called with recv.mu held.
func (s *Shared) largestLocked() *recvAcct {
	byPeer := map[string]int64{}
	for a := range s.recv.accts {
		byPeer[a.peer] += a.held
	}
	var top string
	var most int64 = -1
	for p, n := range byPeer {
		if n > most || (n == most && p < top) {
			top, most = p, n
		}
	}
	var v *recvAcct
	for a := range s.recv.accts {
		if a.peer != top || a.held == 0 {
			continue
		}
		if v == nil || a.held > v.held || (a.held == v.held && a.since.After(v.since)) {
			v = a
		}
	}
	return v
}

// Staging: a frame body larger than stageAbove is read into chunks that
// are allocated as the bytes arrive, each at most a quarter of what has
// arrived (at least stageAbove, at most stageChunkMax), so the budget
// counts at most one chunk more than the peer sent, whatever size it
// declared.
const stageChunkMax = 4 << 20

// readBody reads a frame body of size bytes from rd, telling hold of each
// allocation before it is made: at most stageAbove at once, whole; larger
// ones in chunks as the bytes arrive, then joined into one buffer (that
// counts as the chunks did: they are garbage once it is made).
func readBody(rd io.Reader, size uint64, hold func(int64) error) ([]byte, error) {
	if size <= stageAbove {
		if err := hold(int64(size)); err != nil {
			return nil, err
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, unexpected(err)
		}
		return b, nil
	}
	var chunks [][]byte
	var got uint64
	for got < size {
		n := min(size-got, max(uint64(stageAbove), min(got/4, stageChunkMax)))
		if err := hold(int64(n)); err != nil {
			return nil, err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, unexpected(err)
		}
		chunks = append(chunks, b)
		got += n
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	body := make([]byte, 0, size)
	for i, c := range chunks {
		body = append(body, c...)
		chunks[i] = nil
	}
	return body, nil
}

// progress puts deadlines on an unfinished message, so that a peer cannot
// keep a message open (and its connection, and its part of the budget)
// by sending nothing or a trickle: once a message has begun, every read
// must bring bytes within Limits.MessageIdle, and the whole message must
// be in within MessageIdle plus its declared size at minMessageRate. Only
// the connection's reader goroutine uses it; between messages there is no
// deadline (an idle client is fine).
type progress struct {
	nc    net.Conn
	idle  time.Duration
	mid   bool
	start time.Time
	size  int64 // declared so far
	armed bool
}

// minMessageRate is the slowest a message may arrive, on average, once
// MessageIdle has passed: a loopback client sends a GiB in seconds.
const minMessageRate = 1 << 20 // bytes per second

// open notes a frame of size bytes of the message in progress (starting
// one if none is).
func (p *progress) open(size int64) {
	if !p.mid {
		p.mid, p.start, p.size = true, time.Now(), 0
	}
	p.size += size
}

// end: no message in progress; the deadline, if one was set, goes.
func (p *progress) end() {
	p.mid = false
	if p.armed {
		p.armed = false
		_ = p.nc.SetReadDeadline(time.Time{})
	}
}

// beforeRead sets the deadline for a read of the connection that may wait
// for the peer, while a message is in progress.
func (p *progress) beforeRead() {
	if !p.mid {
		return
	}
	now := time.Now()
	d := now.Add(p.idle)
	if whole := p.start.Add(p.idle + time.Duration(p.size/minMessageRate)*time.Second); whole.Before(d) {
		d = whole
	}
	p.armed = true
	_ = p.nc.SetReadDeadline(d)
}
