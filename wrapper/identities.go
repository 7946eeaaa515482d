package wrapper

import (
	"log/slog"
	"sync"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

// Routing identities outlive the supervisor (docs/local-peers.md, issue
// 32). A door refuses another user's claim of a client's identity while
// the client holds it and for zmtp.ReserveFor after its connection drops,
// but a restart ends the supervisor, and the next one's fresh doors bind
// ~100 ms before the client's libzmq reconnects: a keyless user who read
// the identity off iopub would claim it first and get the client's
// replies, its input_request. So what the doors know travels in the state
// directory (record.Dir.WriteIdentities): the next supervisor of the
// kernel, cold or a standby being adopted, reads it in bind, before its
// doors exist (zmtp.Shared.Keep).
//
// It is written as the supervisor stops (stop.go), with each identity held
// then kept for ReserveFor from then, and also while it runs, because a
// SIGKILL (jupyter_client's restart_kernel(now=True), the OOM killer)
// leaves no stop to write it: then each held identity is kept until the
// write plus identityRefresh plus ReserveFor, and the file is rewritten
// every identityRefresh while any is held, so that whenever the SIGKILL
// comes, what the next supervisor reads still keeps them for at least
// ReserveFor. It is written when the held identities change, at most once
// per identityGap: a keyless peer's claims cannot make the supervisor
// write more often than that, nor more than the file's bounds.
const (
	identityRefresh = 5 * time.Minute
	identityGap     = time.Second
)

// identityKeeper keeps the identities file of one supervisor current.
type identityKeeper struct {
	dir *record.Dir
	id  string
	sh  *zmtp.Shared
	log *slog.Logger

	mu   sync.Mutex // one write at a time
	left bool       // the stop's write is done: no other comes after it

	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
}

// keepIdentities seeds the doors about to be bound with what the previous
// supervisor of this kernel left; bind calls it before relay.Bind. The
// file is left in place: should the bind fail, the next try reads it.
func (s *supervisor) keepIdentities() {
	ids, err := s.dir.ReadIdentities(s.id, time.Now())
	if err != nil {
		s.log.Warn("refused the routing identities the previous supervisor left", "err", err)
		return
	}
	if len(ids) == 0 {
		return
	}
	owned := make([]zmtp.Owned, len(ids))
	for i, e := range ids {
		owned[i] = zmtp.Owned(e)
	}
	s.cfg.shared.Keep(owned)
	s.log.Info("routing identities kept for their clients' reconnect, as the previous supervisor knew them", "identities", len(ids))
}

// startIdentityKeeper writes the identities file now (what was kept, or
// no file), and again whenever the held identities change, until the
// stop's write (leaveIdentities) or Run's return, which comes before the
// doors close (their connections' end is no change to record).
func (s *supervisor) startIdentityKeeper() {
	k := &identityKeeper{dir: s.dir, id: s.id, sh: s.cfg.shared, log: s.log,
		quit: make(chan struct{}), done: make(chan struct{})}
	s.identities = k
	go k.run()
	s.onExit(k.stop)
}

// leaveIdentities is the stop's write: each identity held now is kept
// for ReserveFor from now, for the next supervisor; or, when the kernel
// ends for good (shut down, its server gone: no next supervisor comes),
// the file is removed.
func (s *supervisor) leaveIdentities(forGood bool) {
	k := s.identities
	if k == nil {
		return
	}
	k.stop()
	horizon := zmtp.ReserveFor
	if forGood {
		horizon = 0 // nothing kept: the file is removed
	}
	k.write(horizon, true)
}

func (k *identityKeeper) run() {
	defer close(k.done)
	refresh := time.NewTimer(identityRefresh)
	defer refresh.Stop()
	for {
		last := time.Now()
		if k.write(identityRefresh+zmtp.ReserveFor, false) {
			refresh.Reset(identityRefresh)
		} else {
			refresh.Stop() // nothing held: nothing to keep fresh, no wake-up
		}
		select {
		case <-k.sh.OwnedChanged():
		case <-refresh.C:
		case <-k.quit:
			return
		}
		if wait := time.Until(last.Add(identityGap)); wait > 0 {
			gap := time.NewTimer(wait)
			select {
			case <-gap.C:
			case <-k.quit:
				gap.Stop()
				return
			}
		}
	}
}

// stop ends run and waits for it; idempotent.
func (k *identityKeeper) stop() {
	k.stopOnce.Do(func() { close(k.quit) })
	<-k.done
}

// write replaces the file with what the doors know now, each held
// identity kept for horizon from now, and reports whether any is held.
// After the final write there is no other.
func (k *identityKeeper) write(horizon time.Duration, final bool) (held bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.left {
		return false
	}
	k.left = final
	now := time.Now()
	var ids []record.Identity
	if horizon > 0 { // 0: nothing is kept, and WriteIdentities removes the file
		heldUntil := now.Add(horizon)
		for _, o := range k.sh.Owned(heldUntil) {
			ids = append(ids, record.Identity(o))
			held = held || o.Until.Equal(heldUntil) // a reservation's own end is before it
		}
	}
	if err := k.dir.WriteIdentities(k.id, ids, now); err != nil {
		k.log.Debug("cannot leave the routing identities for the next supervisor", "err", err)
	}
	return held
}
