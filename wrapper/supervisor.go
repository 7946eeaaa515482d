package wrapper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

// Exit codes of Run, beyond the kernel's own (see Run).
const (
	ExitOK     = 0
	ExitUsage  = 2   // bad connection file, port in use, bad flags
	ExitExec   = 126 // the kernel could not be executed
	ExitNoExec = 127 // the kernel's program was not found
	ExitFailed = 1   // anything else that kept the kernel from running
)

// Defaults fit jupyter_client's budget: it SIGTERMs the supervisor 2.5 s
// after shutdown_request (half of shutdown_wait_time), so grace + kill +
// reply must end well before.
const (
	DefaultShutdownGrace = time.Second
	DefaultKillTimeout   = 1200 * time.Millisecond

	// afterReplyGrace is how long a kernel that has sent its
	// shutdown_reply may take to exit by itself.
	afterReplyGrace = 100 * time.Millisecond
	// jupyterKillAfter is when jupyter_client SIGKILLs a kernel process
	// after shutdown_request (its shutdown_wait_time, 5 s), less a margin.
	jupyterKillAfter = 4500 * time.Millisecond
)

// Config is what `tfgpu-kernel run` was asked to do.
type Config struct {
	ConnFile       string        // the connection file Jupyter wrote
	Argv           []string      // the kernel's argv; ConnFile in it is replaced
	ShutdownGrace  time.Duration // how long the kernel may take to exit after shutdown_request
	KillTimeout    time.Duration // how long killing the tree may take
	InnerTransport string        // "auto" (ipc, else tcp), "ipc" or "tcp"
	Cgroup         string        // containment: CgroupAuto (default), CgroupV2, CgroupNone
	StateDir       string        // where state files go; default StateDir()
	MemoryLimit    int64         // bytes the kernel's tree may use; 0: no limit
	NVMLLibrary    string        // NVML to load; "": libnvidia-ml.so.1 through the dynamic loader
	ConfirmTimeout time.Duration // how long to wait for NVML to release a dead tree's GPU memory
	Limits         zmtp.Limits   // what a client's connection may make the supervisor hold; zero: defaults
	Log            *slog.Logger
	Stderr         io.Writer // where one-line usage errors go

	v2opts []cgroup.V2Option // tests force the cgroup.procs fallback with these
	shared *zmtp.Shared      // tests read the relay's counters through it
}

// state is the supervisor's lifecycle state; only the loop in Run changes it.
type state int

const (
	stateRunning  state = iota // the kernel runs; messages are relayed
	stateStopping              // a shutdown_request was relayed; waiting for the kernel to exit
)

// supervisor holds what Run's loop owns.
type supervisor struct {
	cfg     Config
	log     *slog.Logger
	id      string
	relay   *Relay
	doors   [5]*zmtp.Door // the outer sockets' listeners
	dir     *stateDir     // the state directory, open for the supervisor's life
	watch   *watcher      // the watcher's pipe (watch.go); nil when it could not start
	marker  string        // TFGPU_TREE of the kernel's tree (watch.go)
	reserve *fdReserve    // released for the tree kill
	tree    cgroup.Tree
	kpid    int
	state   state
	events  chan relayEvent

	mem            cgroup.Memory // the memory limit, if one could be applied
	gpu            *gpu.NVML     // the NVML session; nil: GPU release is not checked
	baseline       []gpu.Holder  // NVML's process list before the kernel spawned
	noFigures      bool          // NVML gave no per-process memory figure; said once
	pendingWarning string        // for the first cell: what a dead predecessor's tree still holds
	shutdown       *relayEvent   // the shutdown_request being served
	shutdownAt     time.Time     // when it came
	replied        bool          // the kernel's shutdown_reply was relayed
	innerDir       string
	st             State            // as recorded in the state file
	sigc           <-chan os.Signal // the signals the loop reads; stop reads it after the loop
}

// Run supervises one kernel until it is shut down or dies, and returns the
// process exit code: 0 after a clean shutdown or a stop by signal; 2 for
// usage errors; 126/127 when the kernel cannot be executed; when the kernel
// dies on its own, its exit code, or 128+signal.
func Run(ctx context.Context, cfg Config) int {
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.KillTimeout <= 0 {
		cfg.KillTimeout = DefaultKillTimeout
	}
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = DefaultConfirmTimeout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	// A burst (a 50 MB comm buffer, a print flood) would otherwise leave the
	// Go heap large long after (DESIGN §4).
	debug.SetMemoryLimit(64 << 20)

	ci, err := jmsg.Load(cfg.ConnFile)
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "tfgpu-kernel: %v\n", err)
		return ExitUsage
	}
	signer, err := jmsg.NewSigner(ci.SignatureScheme, ci.Key)
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "tfgpu-kernel: connection file %s: %v\n", cfg.ConnFile, err)
		return ExitUsage
	}
	s := &supervisor{cfg: cfg, id: jmsg.KernelID(cfg.ConnFile), events: make(chan relayEvent, 16)}
	s.log = cfg.Log.With("kernel", shortID(s.id))
	if !validKernelID(s.id) {
		// jupyter_server names files kernel-<uuid>.json; any other name is
		// hashed, so only a hand-made kernel-<odd>.json gets here.
		fmt.Fprintf(cfg.Stderr, "tfgpu-kernel: connection file %s: kernel id %q has characters other than letters, digits, '-', '_' and '.'\n",
			cfg.ConnFile, Printable(s.id))
		return ExitUsage
	}
	// The state directory first: one that is not the user's own is refused
	// before anything is read from it or started (docs/security.md).
	if cfg.StateDir == "" {
		cfg.StateDir = StateDir()
	}
	if cfg.StateDir == "" {
		fmt.Fprintf(cfg.Stderr, "tfgpu-kernel: no state directory: no XDG_RUNTIME_DIR and no home directory; set --state-dir (TFGPU_STATE_DIR)\n")
		return ExitUsage
	}
	s.cfg.StateDir = cfg.StateDir
	if s.dir, err = openStateDir(cfg.StateDir, true, false); err != nil {
		fmt.Fprintf(cfg.Stderr, "tfgpu-kernel: %v\n", err)
		return ExitUsage
	}
	defer s.dir.Close()

	// Signals first, so a SIGINT that arrives while starting is forwarded,
	// not fatal (Go's default for SIGINT is to exit).
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, parentDeathSignal)
	defer signal.Stop(sigc)
	s.sigc = sigc
	defer watchParent()()
	if parentGone() {
		s.log.Warn("the process that started the kernel is already gone; not starting")
		return ExitFailed
	}

	s.reserve = reserveFDs(16)
	defer s.reserve.release()
	if cfg.shared == nil {
		cfg.shared = zmtp.NewShared(cfg.Limits, s.log)
	}
	outer, doors, err := bindOuter(ctx, ci, cfg.shared, zmqLogger(s.log))
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "tfgpu-kernel: connection file %s: %v\n", cfg.ConnFile, err)
		return ExitUsage
	}
	defer closeAll(outer[:])
	s.doors = doors

	inner, dir, err := writeInner(ci, s.id, cfg.InnerTransport)
	if err != nil {
		s.log.Error("cannot write the inner connection file", "err", err)
		return ExitFailed
	}
	s.innerDir = dir
	defer os.RemoveAll(dir)

	if err := cgroup.SetChildSubreaper(); err != nil {
		s.log.Warn("cannot become child subreaper; escaped daemons may survive", "err", err)
	}
	reaper := cgroup.StartReaper()
	defer reaper.Stop()
	if cfg.Cgroup == "" {
		cfg.Cgroup = CgroupAuto
	}
	// DESIGN §6: NVML before anything is killed or spawned, so that the
	// release of what dead supervisors left can be confirmed too.
	s.openGPU()
	defer s.closeGPU()
	s.reapDead()
	tree, why, err := newTree(cfg.Cgroup, s.id, reaper, cfg.v2opts...)
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "tfgpu-kernel: containment: %v\n", err)
		return ExitUsage
	}
	s.tree = tree
	defer func() { s.tree.Close() }() // spawn may replace the tree
	s.log.Info("containment", "mode", tree.Mode(), "why", why)
	if lt, ok := tree.(interface{ Leftovers() int }); ok && lt.Leftovers() > 0 {
		// DESIGN §3 Start 3: a previous supervisor of this kernel was
		// SIGKILLed and its tree lived on; it is gone before the new kernel.
		s.log.Warn("killed processes left by a previous supervisor of this kernel", "processes", lt.Leftovers())
	}

	defer func() {
		if s.mem != nil {
			s.mem.Close()
		}
	}()
	if st, ok := tree.(*scopeTree); ok {
		st.memLimit = cfg.MemoryLimit // systemd applies it to the scope
	} else if cfg.MemoryLimit > 0 {
		s.limitMemory(cfg.MemoryLimit)
	}

	// The watcher, from here on: should this supervisor be SIGKILLed, it
	// finishes the kernel (watch.go). It knows the cgroups already.
	s.marker = newMarker(s.id)
	s.startWatcher(reaper)
	defer s.watch.done()
	if st, err := s.describe(); err == nil {
		s.watch.send(watchMsg{Record: &st})
	}

	// DESIGN §6: the previous tree's GPU memory is back (or the user will
	// be told) before the new kernel starts.
	warning := s.takeHandoff()
	if warning == "" {
		warning = s.pendingWarning
	}
	s.takeBaseline()
	s.watch.send(watchMsg{Baseline: s.baseline})

	exited, code := s.spawn(reaper, substituteConn(cfg.Argv, cfg.ConnFile, dir+"/"+innerConnName))
	if exited == nil {
		return code
	}
	s.record()
	defer removeState(s.dir, s.id)
	s.relay = newRelay(ctx, outer, doors, inner, signer, s.events, s.log)
	defer s.relay.closeInner()
	if warning != "" {
		s.relay.warnNextCell(s.id, warning)
	}
	s.log.Info("kernel started", "pid", s.kpid, "containment", s.tree.Mode(), "inner", inner.Transport)
	return s.loop(ctx, sigc, exited)
}

// loop is the supervisor's one event loop; every case is a lifecycle event.
func (s *supervisor) loop(ctx context.Context, sigc <-chan os.Signal, exited <-chan cgroup.ExitStatus) int {
	var grace <-chan time.Time
	ready := s.relay.ready
	for {
		select {
		case <-ready:
			ready = nil
			if s.state == stateRunning {
				s.setPhase(PhaseRunning)
			}

		case ev := <-s.events:
			switch ev.kind {
			case evShutdownRequest:
				// Relayed to the kernel already; give it the grace to
				// reply and exit on its own, then stop() kills what is left.
				if s.state == stateRunning {
					s.state = stateStopping
					s.setPhase(PhaseStopping)
					s.shutdown, s.shutdownAt = &ev, time.Now()
					grace = time.After(s.cfg.ShutdownGrace)
				}
			case evShutdownReply:
				s.replied = true
				if s.state == stateStopping {
					// The kernel has said its last word; what it does
					// before exiting (ipykernel terminates its children
					// one by one, for seconds) is the tree kill's job.
					grace = time.After(min(afterReplyGrace, time.Until(s.shutdownAt.Add(s.cfg.ShutdownGrace))))
				}
			}

		case st := <-exited:
			if s.state == stateStopping {
				return s.stop("shutdown", &st)
			}
			return s.died(st)

		case <-grace:
			s.log.Debug("kernel still running after shutdown grace", "grace", s.cfg.ShutdownGrace)
			return s.stop("shutdown", nil)

		case sig := <-sigc:
			switch sig {
			case unix.SIGINT:
				// interrupt_mode "signal": the kernel's whole process group,
				// as Jupyter would do for a kernel it started itself. But not
				// before the kernel has said anything: jupyter_client sends
				// SIGINT before every shutdown, and a Python still importing
				// ipykernel dies of it (KeyboardInterrupt), which would turn
				// a shutdown right after a restart into a "kernel died".
				if !s.relay.isReady() {
					s.log.Debug("SIGINT before the kernel is ready: not forwarded")
					continue
				}
				if err := unix.Kill(-s.kpid, unix.SIGINT); err != nil && !errors.Is(err, unix.ESRCH) {
					s.log.Warn("cannot forward SIGINT", "err", err)
				}
			case parentDeathSignal:
				if parentGone() {
					return s.stop("the Jupyter server is gone", nil)
				}
			default: // SIGTERM, SIGHUP: an orderly stop, as for shutdown
				return s.stop(unix.SignalName(sig.(unix.Signal)), nil)
			}

		case <-ctx.Done():
			return s.stop("context canceled", nil)
		}
	}
}

// stop ends the kernel in order: (the shutdown_request was relayed and the
// grace has passed or the kernel exited) kill every process left in the
// tree → wait until none is alive → answer the client if the kernel did
// not → let queued replies out. It returns the exit code: 0.
func (s *supervisor) stop(reason string, st *cgroup.ExitStatus) int {
	s.reserve.release() // the descriptors the kill and the GPU check need
	s.setPhase(PhaseStopping)
	old := s.beforeKill()
	start := time.Now()
	killed, err := s.killTree()
	took := time.Since(start)
	attrs := []any{"reason", reason, "processes_killed", killed, "killed_in", took.Round(time.Millisecond)}
	if st != nil {
		attrs = append(attrs, "kernel_exit", st.String())
	}
	if s.shutdown != nil {
		attrs = append(attrs, "restart", s.shutdown.restart)
		s.answerShutdown()
	}
	if err != nil {
		s.log.Error("kernel stopped, but processes survive", append(attrs, "err", err)...)
	} else {
		s.log.Info("kernel stopped", attrs...)
	}
	switch {
	case s.shutdown != nil && s.shutdown.restart:
		s.handOff(old) // the next kernel confirms, before it starts
	case s.shutdown != nil:
		// jupyter_client SIGTERMs the supervisor 2.5 s after its
		// shutdown_request and SIGKILLs it at 5 s (DESIGN §3): confirm
		// until then, but a SIGTERM means Jupyter is waiting, so stop
		// there and leave the rest to the next start of this kernel (or
		// to tfgpu-kernel stop).
		ctx, cancel := context.WithTimeout(context.Background(),
			min(s.cfg.ConfirmTimeout, max(jupyterKillAfter-time.Since(s.shutdownAt), 0)))
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
		if _, held := s.confirmWithin(ctx, reason, old); held {
			s.handOff(old)
		}
	default:
		s.confirm(reason, old)
	}
	zmtp.Drain(200*time.Millisecond, s.doors[:]...)
	return ExitOK
}

// died handles a kernel that exited on its own: kill the rest of its tree,
// tell the cell it was running why, and exit with the kernel's code so that
// Jupyter's restarter starts a fresh kernel.
func (s *supervisor) died(st cgroup.ExitStatus) int {
	s.reserve.release() // the descriptors the kill and the GPU check need
	s.setPhase(PhaseStopping)
	old := s.beforeKill()
	killed, err := s.killTree()
	s.log.Warn("kernel died", "kernel_exit", st.String(), "processes_killed", killed, "err", err)
	s.confirm("kernel died", old)
	text := fmt.Sprintf("tfgpu-kernel: the kernel died (%s).", st.String())
	if s.mem != nil {
		if n, err := s.mem.OOMKills(); err == nil && n > 0 {
			text = fmt.Sprintf("tfgpu-kernel: the kernel was killed by the out-of-memory killer at its memory limit of %s (%s).",
				cgroup.FormatSize(s.mem.Limit()), st.String())
			s.log.Warn("kernel killed at its memory limit", "limit", cgroup.FormatSize(s.mem.Limit()), "oom_kills", n)
		}
	}
	if killed > 0 {
		text += fmt.Sprintf(" %d leftover process(es) of its tree were killed.", killed)
	}
	text += " Jupyter will start a fresh kernel.\n"
	if ex, ok := s.relay.running(); ok {
		s.notifyCell(ex, text, st)
	}
	zmtp.Drain(300*time.Millisecond, s.doors[:]...)
	return st.Code()
}

// notifyCell tells the client that sent ex what happened: a stderr stream
// on iopub, an error execute_reply, and idle, all as replies to ex.
func (s *supervisor) notifyCell(ex execRequest, text string, st cgroup.ExitStatus) {
	r := s.relay
	topic := [][]byte{[]byte("kernel." + s.id + ".stream")}
	if err := r.send(jmsg.IOPub, topic, "stream", ex.header, ex.sess,
		map[string]any{"name": "stderr", "text": text}); err != nil {
		s.log.Debug("cannot notify the cell", "err", err)
	}
	_ = r.send(jmsg.Shell, ex.idents, "execute_reply", ex.header, ex.sess, map[string]any{
		"status": "error", "ename": "KernelDied", "evalue": st.String(),
		"traceback": []string{text}, "execution_count": nil,
	})
	_ = r.send(jmsg.IOPub, [][]byte{[]byte("kernel." + s.id + ".status")}, "status", ex.header, ex.sess,
		map[string]any{"execution_state": "idle"})
}

// answerShutdown sends a shutdown_reply to the client when the kernel did
// not get to send its own, and broadcasts it on iopub (as ipykernel does,
// for the other clients) when the kernel was killed before it could.
func (s *supervisor) answerShutdown() {
	defer s.broadcastShutdown()
	if !s.replied {
		// The kernel may have replied just before it exited; its reply may
		// still be in the relay.
		deadline := time.After(100 * time.Millisecond)
	wait:
		for !s.replied {
			select {
			case ev := <-s.events:
				s.replied = s.replied || ev.kind == evShutdownReply
			case <-deadline:
				break wait
			}
		}
	}
	if s.replied {
		return
	}
	p, err := jmsg.Split(s.shutdown.frames)
	if err != nil {
		return
	}
	h, _ := jmsg.Header(p.Header)
	if err := s.relay.send(jmsg.Control, p.Idents, "shutdown_reply", p.Header, h.Session,
		map[string]any{"status": "ok", "restart": s.shutdown.restart}); err != nil {
		s.log.Debug("cannot send shutdown_reply", "err", err)
	}
}

// broadcastShutdown publishes the shutdown_reply on iopub unless the
// kernel did: ipykernel sends it only after it has terminated its
// children, which the tree kill may have cut short.
func (s *supervisor) broadcastShutdown() {
	if s.relay.shutdownBroadcast.Load() {
		return
	}
	p, err := jmsg.Split(s.shutdown.frames)
	if err != nil {
		return
	}
	h, _ := jmsg.Header(p.Header)
	topic := [][]byte{[]byte("kernel." + s.id + ".shutdown")}
	if err := s.relay.send(jmsg.IOPub, topic, "shutdown_reply", p.Header, h.Session,
		map[string]any{"status": "ok", "restart": s.shutdown.restart}); err != nil {
		s.log.Debug("cannot broadcast shutdown_reply", "err", err)
	}
}

// killTree kills every process of the kernel's tree and waits until none
// is alive, within KillTimeout.
func (s *supervisor) killTree() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.KillTimeout)
	defer cancel()
	return s.tree.Kill(ctx)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
