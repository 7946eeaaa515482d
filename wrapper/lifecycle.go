package wrapper

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/wrapper/relay"
)

// phase is the supervisor's lifecycle state (docs/design.md#lifecycle):
//
//	starting ──first message from the kernel──▶ running
//	starting, running ──shutdown_request──▶ stopping (the kernel's grace)
//	any ──kernel exit, grace over, SIGTERM/SIGHUP, server gone──▶ stop() ──▶ stopped
//	starting, running ──stop order (SIGUSR1), GPU memory limit──▶ stop() ──▶ parked
//	parked ──a request that needs a kernel──▶ starting (a fresh kernel, park.go)
//
// Only the loop and the stop path change it, through enter, which records
// it in the kernel's state file for ps.
type phase int

const (
	starting phase = iota // spawned; the kernel has not said anything yet
	running               // the kernel answers
	stopping              // a stop was decided; the tree is being killed
	stopped               // the tree is dead; what is left is to let replies out
	parked                // the tree is dead; the place is kept for a fresh kernel (park.go)
)

func (p phase) String() string {
	return [...]string{record.PhaseStarting, record.PhaseRunning, record.PhaseStopping, "stopped", record.PhaseParked}[p]
}

// enter moves to phase p and records it (a stopped kernel's record is
// removed as Run returns, so that phase is not written).
func (s *supervisor) enter(p phase) {
	if s.phase == p {
		return
	}
	s.phase = p
	if p == stopped || s.st.KernelID == "" {
		return
	}
	s.st.Phase = p.String()
	if err := s.dir.Write(s.st); err != nil {
		s.log.Debug("cannot record the kernel's phase", "phase", p, "err", err)
	}
}

// afterReplyGrace is how long a kernel alone in its tree that has sent its
// shutdown_reply may take to exit by itself (its exit handlers run). A
// kernel with children is not waited for (leaderHasCompany).
const afterReplyGrace = 100 * time.Millisecond

// leaderHasCompany reports whether the kernel's process has other
// processes in its tree, or children it has not reaped. After its
// shutdown_reply, ipykernel then terminates them one by one, waiting 10 ms,
// 30 ms, 100 ms, … up to 10 s between rounds while any child, a zombie
// included, is left, before it publishes its last message and exits.
func (s *supervisor) leaderHasCompany() bool {
	if pids, err := s.tree.Pids(); err == nil && len(pids) > 1 {
		return true
	}
	return proc.HasChildren(s.kpid)
}

// loop is the supervisor's one event loop; every case is a lifecycle
// event, and every way out is the one stop path (stop.go) with its cause.
func (s *supervisor) loop(ctx context.Context, exited <-chan proc.ExitStatus) int {
	var grace <-chan time.Time
	var req *shutdownRequest // the one being served, from stopping on
	ready := s.relay.Ready()
	for {
		select {
		case <-ready:
			ready = nil
			if s.phase == starting {
				s.enter(running)
			}
			s.startStandby() // the spare for the next restart (standby.go)

		case st := <-s.standbyExited():
			s.standbyEnded(st)

		case <-s.stubGone:
			// A standby that took over: the process Jupyter launched is
			// its parent, as far as Jupyter knows (standby.go).
			return s.stop(cause{reason: "the process Jupyter started is gone", request: req})

		case ev := <-s.events:
			switch {
			case ev.Kind == relay.ShutdownRequest && req == nil:
				// Relayed to the kernel already; give it the grace to
				// reply and exit on its own, then stop() kills what is left.
				req = &shutdownRequest{Event: ev, at: time.Now()}
				s.enter(stopping)
				grace = time.After(s.cfg.ShutdownGrace)
			case ev.Kind == relay.ShutdownReply && req != nil:
				req.replied = true
				if s.leaderHasCompany() {
					// ipykernel now terminates its children one by one
					// and waits for each, zombies it never reaps included
					// (for seconds): that is the tree kill's job, done at once.
					return s.stop(cause{reason: "shutdown", request: req})
				}
				grace = time.After(min(afterReplyGrace, time.Until(req.at.Add(s.cfg.ShutdownGrace))))
			case ev.Kind == relay.ShutdownBroadcast && req != nil:
				// The kernel's last word is out (its reply, sent before it
				// on control, may still be in the relay: stop waits for
				// it): what the kernel does after it, exiting the
				// interpreter, is the tree kill's to end.
				return s.stop(cause{reason: "shutdown", request: req})
			}

		case st := <-exited:
			if req != nil {
				return s.stop(cause{reason: "shutdown", exit: &st, request: req})
			}
			return s.stop(cause{reason: "kernel died", exit: &st, died: true})

		case ask := <-s.usagec:
			ask <- s.usageNow()

		case ask := <-s.oomc:
			ask.answer <- s.oomText(ask.fw)

		case <-s.limitKick():
			s.cellStarted()

		case <-s.limitTimer():
			// Not while a shutdown is served: the tree is about to go.
			if use := s.sampleGPU(); use != nil && req == nil {
				return s.stop(cause{reason: "over its GPU memory limit", gpuOver: use, park: &record.Order{At: time.Now()}})
			}

		case <-grace:
			s.log.Debug("kernel still running after shutdown grace", "grace", s.cfg.ShutdownGrace)
			return s.stop(cause{reason: "shutdown", request: req})

		case sig := <-s.sigc:
			switch sig {
			case unix.SIGINT:
				s.interrupt()
			case parentDeathSignal:
				if parentGone() {
					return s.stop(cause{reason: "the Jupyter server is gone", request: req, serverGone: true})
				}
			case parkSignal:
				if req == nil { // a shutdown being served goes on
					return s.stop(s.orderCause())
				}
			default: // SIGTERM, SIGHUP: an orderly stop, as for shutdown
				return s.stop(cause{reason: unix.SignalName(sig.(unix.Signal)), request: req})
			}

		case <-ctx.Done():
			return s.stop(cause{reason: "context canceled", request: req})
		}
	}
}

// interrupt forwards SIGINT (interrupt_mode "signal") to the kernel's whole
// process group, as Jupyter would for a kernel it started itself. But not
// before the kernel has said anything: jupyter_client sends SIGINT before
// every shutdown, and a Python still importing ipykernel dies of it
// (KeyboardInterrupt), which would turn a shutdown right after a restart
// into a "kernel died".
func (s *supervisor) interrupt() {
	if !s.relay.IsReady() {
		s.log.Debug("SIGINT before the kernel is ready: not forwarded")
		return
	}
	if err := unix.Kill(-s.kpid, unix.SIGINT); err != nil && !errors.Is(err, unix.ESRCH) {
		s.log.Warn("cannot forward SIGINT", "err", err)
	}
}
