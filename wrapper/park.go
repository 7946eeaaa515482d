package wrapper

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/wrapper/relay"
)

// Parked kernels (docs/design.md#parked-kernels). `tfgpu-kernel stop`
// (an order in the state directory, then SIGUSR1), `stop --idle-for` and
// the GPU memory limit kill the kernel's tree and confirm the GPU release
// as any stop does, but the supervisor stays: it keeps the five ports, so
// Jupyter sees an idle kernel and its restarter never fires, and the relay
// answers the heartbeat and kernel_info itself. The next request that needs
// a kernel starts a fresh one, as a restart would, and the first cell the
// user runs is told what happened.

// exitParked is stop's answer when it parked the kernel rather than ended
// the supervisor: Run then waits for the next request.
const exitParked = -1

// parkSignal asks the supervisor to take the order left for it.
const parkSignal = unix.SIGUSR1

// orderCause is the stop that the order left for this supervisor asks
// for. A SIGUSR1 without a readable order still parks, in the
// supervisor's own name.
func (s *supervisor) orderCause() cause {
	o, err := s.dir.TakeOrder(s.id)
	if err != nil {
		s.log.Warn("unreadable stop order; parking the kernel all the same", "err", err)
	}
	if o == nil {
		o = &record.Order{At: time.Now()}
	}
	reason := "stopped"
	if o.By != "" {
		reason += " by " + o.By
	}
	if o.Why != "" {
		reason += " (" + o.Why + ")"
	}
	return cause{reason: reason, park: o}
}

// park is the end of a stop that parks (the kernel detached from the relay
// before the kill, the cell it ran in cell): the release is confirmed, the
// cell that ran, or else the next one the user runs, is told, and the
// record says parked.
func (s *supervisor) park(c cause, old *gpu.Old, killed int, cell relay.Cell) int {
	released, held, freed := s.confirmRelease(c.reason, old)
	s.publishRelease(c, old) // for the notebook's page (release.go)
	at := time.Now()
	text := "tfgpu-kernel: the kernel was " + c.reason
	if c.gpuOver != nil {
		text = fmt.Sprintf("tfgpu-kernel: the kernel used %s, over its limit of %s", c.gpuOver.text(), gpu.FormatBytes(c.gpuOver.limit))
	}
	text += fmt.Sprintf(" at %s: its whole process tree was killed (%d processes)", at.Format("15:04"), killed)
	switch {
	case released != "":
		text += "; GPU memory released: " + released + " (NVML confirmed)"
	case held != "":
		text += "; " + strings.TrimSpace(strings.TrimPrefix(held, "tfgpu-kernel: "))
	}
	text += "."
	evalue := "kernel stopped"
	if c.gpuOver != nil {
		evalue = "over its GPU memory limit"
	}
	told := s.relay.TellCell(s.id, cell, text+" Its variables are gone; the next cell starts a fresh kernel.\n", evalue)
	if !told {
		// Nobody heard it: the first cell the user runs next is told.
		s.relay.WarnNextCell(s.id, text+" This is a fresh kernel.\n")
	}
	if s.activity != nil {
		s.activity.Set(false, at)
	}
	if s.limit != nil {
		s.limit.timer.Stop()
		s.limit = nil
	}
	if s.genCancel != nil {
		s.genCancel()
	}
	s.kpid = 0
	s.enter(parked)
	by := ""
	if c.park != nil {
		by = c.park.By
	}
	why := strings.TrimPrefix(c.reason, "stopped")
	if c.park != nil {
		why = c.park.Why
	}
	if c.gpuOver != nil {
		why = "over its GPU memory limit"
	}
	// No kernel, so no GPUs of its: the fresh one is placed again (respawn).
	s.placement = nil
	s.st.Phase, s.st.KernelPID, s.st.KernelStart, s.st.Tree, s.st.Placement = record.PhaseParked, 0, 0, nil, nil
	s.st.Parked = &record.Parked{At: at.UTC(), By: by, Why: why, Killed: killed, Released: released,
		Held: strings.TrimSpace(held), GPU: freed}
	s.applyHold(c.park)
	if err := s.dir.Write(s.st); err != nil {
		s.log.Warn("cannot record the parked kernel", "err", err)
	}
	s.watch.send(watchMsg{Record: &s.st})
	s.log.Debug("kernel parked: the next request starts a fresh one", "reason", c.reason)
	return exitParked
}

// confirmRelease waits until NVML lists none of old, and returns what was
// released ("" when nothing was checked), per device too, or the warning
// for the user.
func (s *supervisor) confirmRelease(event string, old *gpu.Old) (released, warning string, freed map[int]int64) {
	ctx, cancel := context.WithTimeout(context.Background(), s.gpu.timeout)
	defer cancel()
	freed, warning, _ = s.gpu.check(ctx, event, old)
	if len(freed) == 0 { // nothing checked, or the tree held nothing
		return "", warning, nil
	}
	return gpu.Result{Released: freed}.ReleasedText(), warning, freed
}

// waitParked serves the parked kernel's place until a request needs a
// kernel (it then starts one and returns its exit channel), or the
// supervisor is to end (nil and the exit code).
func (s *supervisor) waitParked(ctx context.Context) (<-chan proc.ExitStatus, int) {
	for {
		select {
		case ev := <-s.events:
			switch ev.Kind {
			case relay.KernelWanted:
				s.log.Debug("a client's request needs the kernel: starting a fresh one")
				return s.respawn(ctx)
			case relay.ShutdownRequest:
				// Shut Down or Restart from Jupyter: nothing left to kill.
				s.relay.ReplyShutdown(ev)
				s.relay.BroadcastShutdown(s.id, ev)
				s.log.Info("parked kernel shut down", "restart", ev.Restart)
				s.enter(stopped)
				s.outer.Drain(drainAfterStop)
				return nil, ExitOK
			}
		case ask := <-s.usagec:
			ask <- s.usageParked()
		case <-s.stubGone:
			return nil, ExitOK
		case sig := <-s.sigc:
			switch sig {
			case unix.SIGTERM, unix.SIGHUP:
				s.log.Info("parked kernel's supervisor ends", "signal", unix.SignalName(sig.(unix.Signal)))
				return nil, ExitOK
			case parentDeathSignal:
				if parentGone() {
					return nil, ExitOK
				}
			case parkSignal:
				// Parked already: a hold to set, or to lift (start).
				o, err := s.dir.TakeOrder(s.id)
				if err != nil {
					s.log.Warn("unreadable stop order", "err", err)
				}
				if o != nil && (o.Hold || o.Start) {
					if o.Start {
						o.Hold = false
					}
					s.applyHold(o)
					if err := s.dir.Write(s.st); err != nil {
						s.log.Warn("cannot record the parked kernel", "err", err)
					}
				}
			}
		case <-ctx.Done():
			return nil, ExitOK
		}
	}
}

// respawn starts a fresh kernel in the parked kernel's place: a new tree
// under the same name, the GPU baseline, the kernel, its record, and the
// relay attached to it. The clients' requests that waited go to it.
func (s *supervisor) respawn(ctx context.Context) (<-chan proc.ExitStatus, int) {
	s.reserve = reserveFDs(16)
	s.onExit(s.reserve.release)
	oldDir := s.tree.Dir()
	s.tree.Close()
	opened, err := s.openTree() // as the first kernel was contained
	if err != nil {
		s.log.Error("cannot contain a fresh kernel", "err", err)
		return nil, ExitFailed
	}
	s.tree = opened.Tree
	if s.mem != nil && oldDir != "" && s.mem.Where() == oldDir {
		// A cgroup v2 memory limit is memory.max of the tree's own
		// cgroup, which went with the killed tree: the fresh kernel is
		// held to the same limit as the first (#32).
		s.mem.Close()
		s.mem = nil
		if warn := s.limitMemory(s.cfg.MemoryLimit); warn != "" {
			s.relay.WarnNextCell(s.id, warn)
		}
	}
	s.gpu.takeBaseline()
	s.watch.send(watchMsg{Baseline: s.gpu.baseline})
	if tell := s.place(); tell != "" {
		s.relay.WarnNextCell(s.id, tell)
	}
	s.enter(starting)
	s.removeInnerSockets()
	exited, code := s.spawn(substituteConn(s.cfg.Argv, s.cfg.ConnFile, s.innerDir+"/"+innerConnName))
	if exited == nil {
		return nil, code
	}
	s.startGPULimit()
	s.record()
	s.startTracking(ctx)
	s.usageAt = usagePoint{at: time.Now(), cpu: cgroup.TreeCPU(s.tree)}
	s.relay.Attach(s.inner)
	s.log.Info("kernel started", "pid", s.kpid, "containment", s.tree.Mode(), "after", "parked")
	return exited, 0
}

// startTracking starts the proc-mode tree tracker for the kernel now
// (watcher.go), until it is parked or the supervisor ends.
func (s *supervisor) startTracking(ctx context.Context) {
	if s.tree.Mode() != cgroup.ModeProc || s.watch == nil {
		return
	}
	gctx, cancel := context.WithCancel(ctx)
	s.genCancel = cancel
	go s.trackTree(gctx, s.tree)
}

// removeInnerSockets removes the ipc socket files the killed kernel bound
// in the supervisor's private inner directory: libzmq unlinks a stale one
// before binding, other ZMQ libraries (zmq4) fail on it.
func (s *supervisor) removeInnerSockets() {
	if s.inner.Transport != "ipc" {
		return
	}
	for _, ch := range jmsg.Channels {
		path := strings.TrimPrefix(s.inner.Endpoint(ch), "ipc://")
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			_ = unix.Unlink(path)
		}
	}
}

// applyHold holds the parked kernel down as o says, or lifts the hold
// (o.Hold false), and notes it in the record (written by the caller).
func (s *supervisor) applyHold(o *record.Order) {
	p := s.st.Parked
	if p == nil {
		return
	}
	if o == nil || !o.Held(time.Now()) {
		if p.Hold {
			s.log.Info("the parked kernel's hold is lifted: the next request starts a fresh kernel")
		}
		p.Hold, p.HoldUntil, p.Message = false, time.Time{}, ""
		s.relay.SetHold(time.Time{}, "")
		return
	}
	p.Hold, p.HoldUntil, p.Message = true, o.HoldUntil.UTC(), o.Message
	who := "its operator"
	if o.By != "" {
		who = o.By
	}
	until := "until " + who + " starts it again (tfgpu-kernel start " + s.id + ")"
	if !o.HoldUntil.IsZero() {
		until = "until " + o.HoldUntil.Local().Format("Jan 2 15:04")
	}
	text := "tfgpu-kernel: this kernel is held down by " + who + " " + until
	if o.Message != "" {
		text += ": " + o.Message
	}
	text += ". Nothing runs until then; run the cell again after that.\n"
	s.relay.SetHold(o.HoldUntil, text)
	s.log.Info("the parked kernel is held down", "until", until, "by", o.By)
}

// usageParked is the usage figures of a parked kernel: nothing runs and
// nothing is held; the last release and the parking itself for the page.
func (s *supervisor) usageParked() usageFigures {
	set := map[string]any{"kernel_cpu": 0.0, "kernel_memory": 0, "kernel_processes": 0,
		"kernel_usage_of": "the kernel's whole process tree (tfgpu-kernel): stopped", "tfgpu_parked": s.st.Parked}
	if s.limit != nil {
		set["gpu_memory_limit"] = s.limit.limit
	} else if s.cfg.GPUMemoryLimit > 0 {
		set["gpu_memory_limit"] = s.cfg.GPUMemoryLimit
	}
	if s.gpu.sess.Err() == nil {
		devs := []map[string]any{}
		for _, d := range s.gpu.sess.Devices() {
			devs = append(devs, map[string]any{"index": d.Index, "uuid": d.UUID, "name": d.Name,
				"total_bytes": d.Total, "used_bytes": 0})
		}
		set["gpu_memory"], set["gpus"] = int64(0), devs
	}
	if s.gpu.last != nil {
		set[releaseMsgType] = s.gpu.last
	}
	return usageFigures{set: set, fill: map[string]any{"pid": 0, "cpu_count": runtime.NumCPU()}}
}
