package wrapper

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/wrapper/relay"
)

// shutdownRequest is the client's shutdown_request being served.
type shutdownRequest struct {
	relay.Event
	at      time.Time // when it came
	replied bool      // the kernel's shutdown_reply was relayed
}

// cause is why the kernel stops. Every difference between shutdown,
// restart, a signal, the server's death and the kernel's own death is a
// field here, and stop acts on the fields, each where it decides.
type cause struct {
	reason  string           // for the log
	exit    *proc.ExitStatus // the kernel's exit status, when it exited
	request *shutdownRequest // a client asked for the stop (shutdown, or restart)
	died    bool             // the kernel exited unasked: tell its cell, exit with its code
	gpuOver *gpuUse          // the tree was over its GPU memory limit
	park    *record.Order    // keep the kernel's place: a fresh kernel on the next request (park.go)
	// serverGone: the process that started the supervisor (Jupyter's
	// server) is gone: nobody will start the kernel again.
	serverGone bool
}

// code is the exit code of a stop whose kernel died: its own, or
// ExitGPULimit when the supervisor killed it over its GPU memory limit.
func (c cause) code() int {
	if c.exit == nil {
		return ExitGPULimit
	}
	return c.exit.Code()
}

func (c cause) restart() bool { return c.request != nil && c.request.Restart }

// forGood reports whether no next supervisor of the kernel comes: it was
// shut down (not restarted), or its server is gone.
func (c cause) forGood() bool { return (c.request != nil && !c.request.Restart) || c.serverGone }

// jupyterKillAfter is when jupyter_client SIGKILLs a kernel process after
// shutdown_request (its shutdown_wait_time, 5 s), less a margin.
const jupyterKillAfter = 4500 * time.Millisecond

// Drain times: how long the last messages to clients may take to be
// written before the process exits. A shutdown_reply is one small message
// to one socket; a dead kernel's notice is three, to shell and iopub.
const (
	drainAfterStop  = 200 * time.Millisecond
	drainAfterDeath = 300 * time.Millisecond
)

// stop is the one stop path: kill every process of the tree → wait until
// none is alive → answer the client if the kernel did not → confirm the
// GPU release (or hand it to the next kernel) → tell the running cell if
// the kernel died → let queued messages out → leave who owns which routing
// identity for the next supervisor, while the doors are still open. It
// returns the exit code: 0, or the dead kernel's own so that Jupyter's
// restarter starts a fresh one.
func (s *supervisor) stop(c cause) int {
	s.reserve.release() // the descriptors the kill and the GPU check need
	s.enter(stopping)
	// The standby waits for the next supervisor when Jupyter will start
	// one (a restart, or its restarter after a death); else it goes.
	s.endStandby(c.park == nil && (c.restart() || c.died))
	var cell relay.Cell
	if c.park != nil {
		// From here on the clients' requests wait for the next kernel
		// rather than go to this one.
		cell = s.relay.Detach()
	}
	old := s.gpu.watch(s.tree, s.kpid)
	killed, took, err := s.killTree()
	if c.request != nil {
		s.answerShutdown(c.request)
	}
	s.logStop(c, killed, took, err)
	if c.park != nil {
		return s.park(c, old, killed, cell)
	}

	held := "" // the warning when GPU memory is still held after the confirm timeout
	switch {
	case c.restart():
		// jupyter_client starts the next supervisor at once; it confirms,
		// before its kernel starts.
		s.handOff(old)
	case c.request != nil:
		s.confirmBeforeJupyterKills(c, old)
	default:
		held = s.gpu.confirm(c.reason, old)
	}
	s.publishRelease(c, old)
	drain := drainAfterStop
	if c.died {
		s.tellCell(c, killed, held)
		drain = drainAfterDeath
	}
	s.enter(stopped)
	if !s.outer.Drain(drain) {
		s.log.Debug("clients did not take the last messages in time", "waited", drain)
	}
	// A restart's next supervisor comes at once, a dead kernel's from
	// Jupyter's restarter, and after a signal one may (stop --exit); a
	// shut-down kernel's, or one whose server is gone, never does
	// (identities.go).
	s.leaveIdentities(c.forGood())
	if c.died {
		return c.code()
	}
	return ExitOK
}

// killTree kills every process of the kernel's tree and waits until none
// is alive, within KillTimeout.
func (s *supervisor) killTree() (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.KillTimeout)
	defer cancel()
	start := time.Now()
	n, err := s.tree.Kill(ctx)
	// Then whatever still carries the tree's marker: a process that left
	// the cgroup and the process tree both (docs/security.md#threats,
	// class 5). Only processes started since the supervisor are read.
	if m, merr := proc.KillMarkedSince(ctx, s.marker, os.Geteuid(), s.selfStart); m > 0 || merr != nil {
		n += m
		if m > 0 {
			s.log.Warn("killed processes of the kernel's tree found by its marker outside its containment", "processes", m)
		}
		if err == nil {
			err = merr
		}
	}
	return n, time.Since(start), err
}

func (s *supervisor) logStop(c cause, killed int, took time.Duration, err error) {
	attrs := []any{"reason", c.reason, "processes_killed", killed, "killed_in", took.Round(time.Millisecond)}
	if c.exit != nil {
		attrs = append(attrs, "kernel_exit", c.exit.String())
	}
	if c.request != nil {
		attrs = append(attrs, "restart", c.request.Restart)
	}
	if c.park != nil { // one line for the event: the next request starts a fresh kernel
		attrs = append(attrs, "parked", true)
	}
	if c.gpuOver != nil {
		attrs = append(attrs, "gpu_used", c.gpuOver.usedText(), "gpu_limit", gpu.FormatBytes(c.gpuOver.limit))
	}
	switch {
	case err != nil:
		s.log.Error("kernel stopped, but processes survive", append(attrs, "err", err)...)
	case c.gpuOver != nil:
		s.log.Warn("kernel stopped over its GPU memory limit", attrs...)
	case c.died:
		s.log.Warn("kernel died", attrs...)
	default:
		s.log.Info("kernel stopped", attrs...)
	}
}

// confirmBeforeJupyterKills confirms the release after a shutdown.
// jupyter_client SIGTERMs the supervisor 2.5 s after its shutdown_request
// and SIGKILLs it at 5 s: confirm until then, but a SIGTERM means Jupyter
// is waiting, so stop there and leave the rest to the next start of this
// kernel (or to tfgpu-kernel stop, or doctor).
func (s *supervisor) confirmBeforeJupyterKills(c cause, old *gpu.Old) {
	ctx, cancel := context.WithTimeout(context.Background(),
		min(s.cfg.ConfirmTimeout, max(jupyterKillAfter-time.Since(c.request.at), 0)))
	defer cancel()
	go func() {
		for {
			select {
			case sig := <-s.sigc:
				if sig == unix.SIGTERM || sig == unix.SIGHUP {
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	if _, held := s.gpu.confirmWithin(ctx, c.reason, old); held {
		s.handOff(old)
	}
}

// answerShutdown sends a shutdown_reply to the client when the kernel did
// not get to send its own, and broadcasts it on iopub (as ipykernel does,
// for the other clients) when the kernel was killed before it could.
func (s *supervisor) answerShutdown(req *shutdownRequest) {
	defer s.relay.BroadcastShutdown(s.id, req.Event)
	// The kernel may have replied just before it exited; its reply may
	// still be on its way through the relay.
	deadline := time.After(100 * time.Millisecond)
	for !req.replied {
		select {
		case ev := <-s.events:
			req.replied = req.replied || ev.Kind == relay.ShutdownReply
		case <-deadline:
			s.relay.ReplyShutdown(req.Event)
			return
		}
	}
}

// tellCell tells the cell the dead kernel was running why it died and
// what was done (relay.TellRunningCell); held is the GPU check's warning
// when memory is still held. With no cell running (a worker thread went
// over the GPU limit, the kernel crashed between cells) nobody would
// hear it: it is left as a notice for the first cell of the kernel
// Jupyter's restarter starts next (record.Dir.WriteNotice).
func (s *supervisor) tellCell(c cause, killed int, held string) {
	what, evalue := s.deathText(c, killed, held != "")
	if s.relay.TellRunningCell(s.id, "tfgpu-kernel: "+what+" Jupyter will start a fresh kernel.\n"+held, evalue) {
		return
	}
	now := time.Now()
	text := fmt.Sprintf("tfgpu-kernel: the previous kernel stopped at %s, with no cell running: %s "+
		"This is the fresh kernel Jupyter started after it.\n%s", now.Format("15:04:05"), what, held)
	if err := s.dir.WriteNotice(s.id, text, now); err != nil {
		s.log.Warn("no cell was running, and the notice for the next kernel could not be left", "err", err)
		return
	}
	s.log.Info("no cell was running: the next kernel's first cell will be told why this one stopped")
}

// deathText says why the kernel died and what was done, for the user,
// and the evalue of the dead cell's error reply.
func (s *supervisor) deathText(c cause, killed int, stillHeld bool) (what, evalue string) {
	if c.gpuOver != nil {
		released := "its GPU memory was released"
		if stillHeld {
			released = "its GPU memory was not released in time"
		}
		return fmt.Sprintf("the kernel used %s, over its limit of %s: its whole process tree was killed (%d processes) and %s.",
			c.gpuOver.text(), gpu.FormatBytes(c.gpuOver.limit), killed, released), "over its GPU memory limit"
	}
	what = fmt.Sprintf("the kernel died (%s).", c.exit)
	ownHit := false
	if s.mem != nil {
		n, err := s.mem.OOMKills()
		ownHit = err == nil && n > 0
	}
	outer := s.outerMem
	switch {
	case outer.Hit() && (!ownHit || outer.Limit < s.mem.Limit()):
		// The engine's limit (a container's, a Slurm job's) killed it: the
		// user is told whose, not only "SIGKILL" (#24).
		what = fmt.Sprintf("the kernel was killed by the out-of-memory killer at %s memory limit of %s (%s).",
			s.engine.LimitOwner(), bytesize.Format(outer.Limit), c.exit)
		s.log.Warn("kernel killed at "+s.engine.LimitOwner()+" memory limit", "limit", bytesize.Format(outer.Limit), "cgroup", outer.Dir)
	case ownHit:
		what = fmt.Sprintf("the kernel was killed by the out-of-memory killer at its memory limit of %s (%s).",
			bytesize.Format(s.mem.Limit()), c.exit)
		s.log.Warn("kernel killed at its memory limit", "limit", bytesize.Format(s.mem.Limit()))
	}
	if killed > 0 {
		what += fmt.Sprintf(" %d leftover process(es) of its tree were killed.", killed)
	}
	return what, c.exit.String()
}
