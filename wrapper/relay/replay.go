package relay

import "sync"

// digestHistory remembers the signatures of the signed requests the
// supervisor acted on, so that a replayed copy (same signature) is never
// acted on twice. jupyter_client's Session keeps such a history for the
// same reason (Session.digest_history); the kernel behind us keeps its own.
// It is bounded: past max entries the oldest are forgotten, like
// jupyter_client's, which culls when it reaches its bound.
type digestHistory struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
	ring []string // insertion order, for eviction
	next int
}

func newDigestHistory(max int) *digestHistory {
	return &digestHistory{max: max, seen: map[string]struct{}{}}
}

// first records sig and reports whether it was new.
func (h *digestHistory) first(sig []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, dup := h.seen[string(sig)]; dup {
		return false
	}
	k := string(sig)
	if len(h.ring) < h.max {
		h.ring = append(h.ring, k)
	} else {
		delete(h.seen, h.ring[h.next])
		h.ring[h.next] = k
		h.next = (h.next + 1) % h.max
	}
	h.seen[k] = struct{}{}
	return true
}
