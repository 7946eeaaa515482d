package zmtp

import (
	"context"
	"time"
)

// iopub: the hold a lagging reader of the kernel's owner puts on the
// writer (WaitRoom), and the topics subscribed to (OnSubscribe).

// OnSubscribe has f called, on a PUB door, with every topic that gains
// its first subscriber among all connections: what an XPUB socket (without
// XPUB_VERBOSE) reports upstream, and what ipykernel ≥ 7.2 answers with an
// iopub_welcome. f must not block. Call it before clients connect.
func (d *Door) OnSubscribe(f func(topic []byte)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onSubscribe = f
}

// Topics returns the topics subscribed to now, by any connection.
func (d *Door) Topics() [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([][]byte, 0, len(d.topics))
	for t := range d.topics {
		out = append(out, []byte(t))
	}
	return out
}

// topic counts a connection's subscription (+1) or its end (-1), and says
// a first subscriber to OnSubscribe.
func (d *Door) topic(t string, delta int) {
	d.mu.Lock()
	if d.topics == nil {
		d.topics = map[string]int{}
	}
	d.topics[t] += delta
	n, f := d.topics[t], d.onSubscribe
	if n <= 0 {
		delete(d.topics, t)
	}
	d.mu.Unlock()
	if delta > 0 && n == 1 && f != nil {
		f([]byte(t))
	}
}

// hold1 counts a connection holding the writer up (+1) or letting go (-1).
func (d *Door) hold1(delta int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.heldN += delta
	if d.heldN == 0 && d.heldFree != nil {
		close(d.heldFree)
		d.heldFree = nil
	}
}

// WaitRoom blocks while a connection of the kernel's owner lags behind the
// door's output (its queue past Limits.QueueLimit while it reads), or until
// ctx ends: the relay then stops reading the kernel, so the kernel waits
// for a slow client and nothing piles up in between. It waits at most
// Limits.HoldFor per call, and no longer for a connection that stopped
// reading (StallAfter): such a connection's hold is spent, and until it has
// caught up it misses messages instead (conn.full), so no reader can slow
// the kernel's output for long. Connections of other peers never hold it
// (conn.mayHold); the supervisor's own messages never wait (only the
// relay's copy of the kernel's output calls WaitRoom).
func (d *Door) WaitRoom(ctx context.Context) {
	var deadline time.Time
	for {
		d.mu.Lock()
		if d.heldN == 0 {
			d.mu.Unlock()
			return
		}
		if d.heldFree == nil {
			d.heldFree = make(chan struct{})
		}
		ch := d.heldFree
		d.mu.Unlock()
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(d.sh.lim.HoldFor)
		}
		t := time.NewTimer(min(deadline.Sub(now), d.sh.lim.StallAfter/2) + time.Millisecond)
		select {
		case <-ch:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			return
		}
		d.spendHolds(time.Now().After(deadline))
	}
}

// spendHolds ends the hold of every connection that stopped reading, or of
// every lagging one when all is set.
func (d *Door) spendHolds(all bool) {
	d.mu.Lock()
	lagging := make([]*conn, 0, d.heldN)
	for c := range d.conns {
		lagging = append(lagging, c)
	}
	d.mu.Unlock()
	for _, c := range lagging { // each conn's lock before the door's
		c.mu.Lock()
		if c.lagSet && (all || c.stalled()) {
			c.spendHold()
		}
		c.mu.Unlock()
	}
}
