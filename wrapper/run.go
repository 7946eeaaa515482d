package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/engine"
	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
	"github.com/tfgpu/tfgpu-kernel/wrapper/relay"
)

// supervisor holds what Run owns. Only the loop (lifecycle.go) changes
// phase; every other field is set up before it starts.
type supervisor struct {
	cfg    Config
	log    *slog.Logger
	id     string           // the kernel id
	signer *jmsg.Signer     // the session key's
	dir    *record.Dir      // the state directory, open for the supervisor's life
	sigc   <-chan os.Signal // the signals the loop reads; the stop path reads it after the loop
	outer  *relay.Outer     // the sockets Jupyter's clients connect to
	relay  *relay.Relay
	// activity publishes whether a cell runs, for ps and stop --idle-for
	// (nil when it could not be created).
	activity  *record.ActivityWriter
	events    chan relay.Event
	reserve   *fdReserve // released for the tree kill
	reaper    *proc.Reaper
	tree      cgroup.Tree
	mode      string                 // the containment mode the kernel's first tree was given (openTree)
	mem       cgroup.Memory          // the memory limit, if one could be applied
	outerMem  *cgroup.OuterMemory    // the limit of the cgroups the supervisor started in (a container's, a job's)
	engine    engine.Engine          // what the supervisor runs inside (internal/engine)
	gpu       *gpuCheck              // the GPU policy (gpu.go)
	limit     *gpuLimit              // the GPU memory limit (gpulimit.go); nil without one
	usagec    chan chan usageFigures // the relay's usage_reply asks the loop (usage.go)
	oomc      chan oomAsk            // the relay's GPU out-of-memory explanation asks the loop (oom.go)
	usageAt   usagePoint             // the tree's CPU time at the last usage figures
	watch     *watcher               // the watcher's pipe (watcher.go); nil when it could not start
	marker    string                 // proc.MarkerEnv of the kernel's tree
	genCancel context.CancelFunc     // ends the proc-mode tree tracker of the kernel now
	selfStart uint64                 // this process's start time: the tree's processes start later
	placement *record.Placement      // the GPUs --gpus auto gave the kernel that runs now (place.go)

	inner    *jmsg.ConnInfo // the kernel's own connection file
	innerDir string         // the 0700 directory of it and its sockets
	kpid     int            // the kernel's pid
	phase    phase
	st       record.State // as recorded in the state file

	cleanups []func() // run in reverse when Run returns
	code     int      // what Run returns, for the cleanups

	// The spare kernel (sparekeep.go, standby.go, stub.go;
	// docs/design.md#spare-kernel).
	spareOff   string        // why this kernel has no spare ("": it has one)
	standby    *standbyProc  // the standby supervisor this one started, while it runs
	keepChild  int           // a standby that outlives this supervisor (a restart's)
	restarting bool          // this supervisor ends for a restart: its next one comes
	stub       *net.UnixConn // a standby's: the process Jupyter started, once adopted
	stubRef    *proc.Ref     // that process, for the record
	stubGone   chan struct{} // closed when the stub's connection ends

	identities *identityKeeper // who owns which routing identity, for the next supervisor (identities.go)
}

// Run supervises one kernel until it is shut down or dies, and returns the
// process exit code: 0 after a clean shutdown or a stop by signal; 2 for
// usage errors; 126/127 when the kernel cannot be executed; when the kernel
// dies on its own, its exit code, or 128+signal (docs/design.md#lifecycle).
func Run(ctx context.Context, cfg Config) int {
	// A burst (a 50 MB comm buffer, a print flood) would otherwise leave
	// the Go heap large long after.
	debug.SetMemoryLimit(64 << 20)
	s := &supervisor{cfg: cfg.withDefaults(), events: make(chan relay.Event, 16)}
	defer s.cleanup()
	s.code = s.run(ctx)
	return s.code
}

func (s *supervisor) run(ctx context.Context) int {
	if s.cfg.Refusal != "" {
		return s.refuse(ctx) // refuse.go
	}
	if s.cfg.Standby {
		return s.runStandby(ctx) // standby.go
	}
	if s.cfg.Spare {
		if code, ok := s.adopt(); ok {
			return code // the standby supervised this start (standby.go)
		}
	}
	if code, ok := s.prepare(ctx); !ok {
		return code
	}
	exited, code := s.start(ctx)
	return s.serve(ctx, exited, code)
}

// serve runs the loop until the supervisor is to end: a parked kernel's
// place is served until a fresh kernel starts (park.go).
func (s *supervisor) serve(ctx context.Context, exited <-chan proc.ExitStatus, code int) int {
	for exited != nil {
		if code = s.loop(ctx, exited); code != exitParked {
			return code
		}
		exited, code = s.waitParked(ctx)
	}
	return code
}

// onExit has f run when Run returns, after what was registered later.
func (s *supervisor) onExit(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *supervisor) cleanup() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

// usage writes a one-line error for the user and returns ExitUsage.
func (s *supervisor) usage(format string, args ...any) (int, bool) {
	fmt.Fprintf(s.cfg.Stderr, "tfgpu-kernel: "+format+"\n", args...)
	return ExitUsage, false
}

// prepare does what can fail on bad input, before anything is started:
// the connection file, the state directory, the signals and the five
// sockets Jupyter asked for.
func (s *supervisor) prepare(ctx context.Context) (int, bool) {
	ci, curve, code, ok := s.loadConn()
	if !ok {
		return code, false
	}
	if code, ok := s.identify(); !ok {
		return code, false
	}
	s.catchSignals(true)
	if parentGone() {
		s.log.Warn("the process that started the kernel is already gone; not starting")
		return ExitFailed, false
	}
	return s.bind(ctx, ci, curve)
}

// loadConn reads Jupyter's connection file: its key (s.signer) and its
// CurveZMQ keys, if any.
func (s *supervisor) loadConn() (*jmsg.ConnInfo, *zmtp.CurveKeys, int, bool) {
	ci, signer, curve, err := readConn(s.cfg.ConnFile)
	if err != nil {
		code, _ := s.usage("%v", err)
		return nil, nil, code, false
	}
	s.signer = signer
	return ci, curve, 0, true
}

// readConn reads and checks a connection file: its endpoints, its key's
// signer and its CurveZMQ keys (nil when none). The error names the file.
func readConn(path string) (*jmsg.ConnInfo, *jmsg.Signer, *zmtp.CurveKeys, error) {
	ci, err := jmsg.Load(path)
	if err != nil {
		return nil, nil, nil, err
	}
	signer, err := jmsg.NewSigner(ci.SignatureScheme, ci.Key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connection file %s: %w", path, err)
	}
	curve, err := curveKeys(ci)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connection file %s: %w", path, err)
	}
	return ci, signer, curve, nil
}

// CheckConnFile reports what makes the connection file at path unusable
// (nil when Run could serve it), as Run would say it.
func CheckConnFile(path string) error {
	_, _, _, err := readConn(path)
	return err
}

// identify names the kernel (from the connection file's name) and opens
// the state directory.
func (s *supervisor) identify() (int, bool) {
	cfg := s.cfg
	s.id = jmsg.KernelID(cfg.ConnFile)
	s.log = cfg.Log.With("kernel", record.ShortID(s.id))
	if !record.ValidKernelID(s.id) {
		// jupyter_server names files kernel-<uuid>.json; any other name is
		// hashed, so only a hand-made kernel-<odd>.json gets here.
		return s.usage("connection file %s: kernel id %q has characters other than letters, digits, '-', '_' and '.'",
			cfg.ConnFile, record.Printable(s.id))
	}
	// The state directory first: one that is not the user's own is refused
	// before anything is read from it or started (docs/security.md).
	if cfg.StateDir == "" {
		return s.usage("no state directory: no XDG_RUNTIME_DIR and no home directory; set --state-dir (TFGPU_STATE_DIR)")
	}
	var err error
	if s.dir, err = record.OpenDir(cfg.StateDir, true, false); err != nil {
		return s.usage("%v", err)
	}
	s.onExit(func() { s.dir.Close() })
	return 0, true
}

// catchSignals is done before anything is started, so that a SIGINT that
// arrives while starting is forwarded, not fatal (Go's default for SIGINT
// is to exit). A supervisor Jupyter started (parent) also asks for a
// signal when its parent dies; a standby's parent is the supervisor it
// stands by for, whose end it learns from the leash (standby.go).
func (s *supervisor) catchSignals(parent bool) {
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, parentDeathSignal, parkSignal)
	s.onExit(func() { signal.Stop(sigc) })
	s.sigc = sigc
	if parent {
		s.onExit(watchParent())
	}
}

// bind binds the five sockets Jupyter asked for and writes the kernel's
// own connection file.
func (s *supervisor) bind(ctx context.Context, ci *jmsg.ConnInfo, curve *zmtp.CurveKeys) (int, bool) {
	cfg := s.cfg
	var err error
	s.reserve = reserveFDs(16)
	s.onExit(s.reserve.release)
	if s.cfg.shared == nil {
		s.cfg.shared = zmtp.NewShared(cfg.Limits, s.log)
	}
	if curve != nil {
		s.cfg.shared.UseCurve(curve)
		s.log.Info("transport encryption: the outer sockets speak CurveZMQ")
	}
	// Who owns which routing identity, as the previous supervisor of this
	// kernel knew it, before the first client can connect (identities.go).
	s.keepIdentities()
	if s.outer, err = relay.Bind(ci, s.cfg.shared); err != nil {
		return s.usage("connection file %s: %v", cfg.ConnFile, err)
	}
	s.onExit(s.outer.Close)
	s.startIdentityKeeper() // ends before the doors close
	if s.inner, s.innerDir, err = writeInner(ci, s.id, cfg.InnerTransport, curve != nil); err != nil {
		if errors.Is(err, ErrPlaintextInner) {
			return s.usage("%v", err)
		}
		s.log.Error("cannot write the inner connection file", "err", err)
		return ExitFailed, false
	}
	s.onExit(func() { os.RemoveAll(s.innerDir) })
	return 0, true
}

// start prepares the kernel's containment, GPU check and watcher, finishes
// what dead supervisors left, and spawns the kernel. On failure it returns
// a nil channel and the exit code.
func (s *supervisor) start(ctx context.Context) (<-chan proc.ExitStatus, int) {
	warning, code, ok := s.contain(true)
	if !ok {
		return nil, code
	}
	warning = s.beforeKernel(warning)
	exited, code := s.spawn(substituteConn(s.cfg.Argv, s.cfg.ConnFile, s.innerDir+"/"+innerConnName))
	if exited == nil {
		return nil, code
	}
	s.started(ctx, warning)
	return exited, 0
}

// contain makes the kernel's containment, NVML session and watcher ready,
// and (sweep) finishes what dead supervisors left. It returns what the
// first cell is to be told.
func (s *supervisor) contain(sweep bool) (warning string, code int, ok bool) {
	if err := proc.SetChildSubreaper(); err != nil {
		s.log.Warn("cannot become child subreaper; escaped daemons may survive", "err", err)
	}
	s.reaper = proc.StartReaper()
	s.onExit(func() {
		// Last: the zombies of the killed tree and the watcher are ours
		// to reap; PID 1 of a container may never (reaper.Drain). The
		// standby of a restart lives on (standby.go).
		if !s.reaper.Drain(time.Second, s.keepChild) {
			s.log.Debug("children still running as the supervisor exits")
		}
		s.reaper.Stop()
	})
	// NVML before anything is killed or spawned, so that the release of
	// what dead supervisors left can be confirmed too.
	s.gpu = openGPUCheck(s.cfg.NVMLLibrary, s.cfg.ConfirmTimeout, s.log)
	s.onExit(s.gpu.close)
	if sweep {
		warning = s.sweep()
	}

	s.engine = engine.Detect()
	if s.cfg.engine != nil {
		s.engine = *s.cfg.engine
	}
	if s.engine.Kind != engine.Host {
		s.log.Info("running inside "+s.engine.String(), "evidence", s.engine.Why)
	}
	if l, err := cgroup.DetectLayout(); err == nil {
		s.outerMem = cgroup.NewOuterMemory(l)
	}
	opened, err := s.openTree()
	if err != nil {
		fmt.Fprintf(s.cfg.Stderr, "tfgpu-kernel: containment: %v\n", err)
		return "", ExitUsage, false
	}
	s.tree, s.mode = opened.Tree, opened.Tree.Mode()
	s.onExit(func() { s.tree.Close() }) // spawn may replace the tree
	if s.engine.Kind == engine.Slurm {
		opened.Why = "inside " + s.engine.String() + ": the kernel stays in the job's cgroups, where Slurm's proctrack, kill and memory limit reach it"
		opened.Detail = opened.Why
	}
	s.log.Info("containment", "mode", s.tree.Mode(), "why", opened.Why)
	if opened.Detail != opened.Why {
		s.log.Debug("containment in detail", "detail", opened.Detail) // tfgpu-kernel doctor says it too
	}
	if opened.Leftovers > 0 {
		// A previous supervisor of this kernel was SIGKILLed and its tree
		// lived on; it is gone before the new kernel.
		s.log.Warn("killed processes left by a previous supervisor of this kernel", "processes", opened.Leftovers)
	}
	s.onExit(func() {
		if s.mem != nil {
			s.mem.Close()
		}
	})
	if _, ok := s.tree.(cgroup.Launcher); !ok && s.cfg.MemoryLimit > 0 {
		warning += s.limitMemory(s.cfg.MemoryLimit) // a launcher applies it itself
	}
	if lim := s.outerMemLimit(); lim > 0 {
		s.log.Info("the kernel runs under "+s.engine.LimitOwner()+" memory limit", "limit", bytesize.Format(lim), "cgroup", s.outerMem.Dir)
	}

	// The watcher, from here on: should this supervisor be SIGKILLed, it
	// finishes the kernel (watcher.go). It knows the cgroups already.
	s.marker = proc.NewMarker(s.id)
	s.selfStart, _ = startTime(os.Getpid())
	s.startWatcher()
	s.onExit(s.watch.done)
	if st, err := s.describe(); err == nil {
		s.watch.send(watchMsg{Record: &st})
	}
	s.checkSpare()
	s.onExit(s.forgetSpareOff)
	return warning, 0, true
}

// beforeKernel waits for the previous tree's GPU memory to be back (or
// the user will be told) and takes NVML's baseline, just before the
// kernel starts; it returns warning with what the previous supervisor
// left for the first cell.
func (s *supervisor) beforeKernel(warning string) string {
	warning += s.takeHandoff()
	// Why the previous kernel stopped, when no cell was running to hear it.
	warning = s.takeNotice() + warning
	s.gpu.takeBaseline()
	s.watch.send(watchMsg{Baseline: s.gpu.baseline})
	return warning + s.place()
}

// started records the kernel that runs now and attaches the relay to it.
func (s *supervisor) started(ctx context.Context, warning string) {
	s.startGPULimit()
	s.publishActivity()
	s.record()
	s.startTracking(ctx)
	s.onExit(func() { s.dir.Remove(s.id) })
	s.usagec, s.usageAt = make(chan chan usageFigures), usagePoint{at: time.Now(), cpu: cgroup.TreeCPU(s.tree)}
	s.oomc = make(chan oomAsk)
	s.relay = relay.New(ctx, s.outer, s.inner, s.signer, s.events,
		relay.Hooks{Activity: s.activityChanged, Usage: s.usageHook, CellError: s.cellErrorHook}, s.log)
	s.relay.SetKernelID(s.id)
	s.onExit(s.relay.CloseInner)
	if warning != "" {
		s.relay.WarnNextCell(s.id, warning)
	}
	s.log.Info("kernel started", "pid", s.kpid, "containment", s.tree.Mode(), "inner", s.inner.Transport)
}

// openTree opens the containment of the kernel about to start. The first
// kernel's mode is decided from the engine and --cgroup (containment);
// every fresh kernel after it, after a park, is contained in the mode the
// first one was (s.mode), never decided again from the raw setting: inside
// a Slurm job a park's fresh kernel stays in the job's cgroups like the
// first (#32). A standby that is adopted decides as the first supervisor
// of the kernel did, by the same function, in the same engine.
func (s *supervisor) openTree() (cgroup.Opened, error) {
	choice := s.mode
	if choice == "" {
		choice = s.containment()
	}
	return cgroup.Open(choice, cgroupName(s.id),
		cgroup.Options{Reaper: s.reaper, MemoryLimit: s.cfg.MemoryLimit, V2: s.cfg.v2opts})
}

// containment is the --cgroup choice to open. Inside a Slurm job it is
// always proc: a cgroup of the kernel's own under the job's hides its
// processes from proctrack/cgroup on v1 nodes (Slurm reads the step's
// cgroup.procs, not its children's), is left behind when slurmstepd
// SIGKILLs the step milliseconds after its SIGTERM, and then stops Slurm
// from removing the job's cgroups (docs/design.md#engines).
func (s *supervisor) containment() string {
	choice, _ := cgroup.Choice(s.cfg.Cgroup)
	if s.engine.Kind != engine.Slurm || choice == cgroup.ModeProc {
		return choice
	}
	if choice != cgroup.Auto && choice != "" {
		s.log.Warn("--cgroup "+choice+" is not used inside a Slurm job: the kernel stays in the job's cgroups, where Slurm's kill and limits reach it",
			"job", s.engine.SlurmJob)
	}
	return cgroup.ModeProc
}

// limitMemory applies the memory limit to the kernel's tree-to-be, or
// logs why it cannot (the kernel then runs without one) and returns what
// the first cell is told about it.
func (s *supervisor) limitMemory(limit int64) (tell string) {
	if s.engine.Kind == engine.Slurm {
		// A memory cgroup of ours under the job's would outlive a scancel
		// and keep Slurm from removing the job's cgroups.
		holds := s.engine.SlurmLimit(s.outerMem.Of())
		s.log.Warn("memory limit not applied", "limit", bytesize.Format(limit), "why", "inside "+s.engine.String()+": "+holds)
		return fmt.Sprintf("tfgpu-kernel: the memory limit of %s is not applied inside Slurm job %s: %s.\n",
			bytesize.Format(limit), s.engine.SlurmJob, holds)
	}
	l, err := cgroup.DetectLayout()
	if err == nil {
		var how string
		if s.mem, how, err = cgroup.NewMemoryLimit(l, cgroupName(s.id), limit); err == nil {
			s.log.Info("memory limit", "limit", bytesize.Format(s.mem.Limit()), "how", how)
			return ""
		}
	}
	if s.engine.Kind == engine.Container {
		holds := containerLimitHolds(s.engine, l, s.outerMem)
		s.log.Warn("memory limit not applied", "limit", bytesize.Format(limit), "why", err, "inside", s.engine.String(), "holds", holds)
		return fmt.Sprintf("tfgpu-kernel: the memory limit of %s is not applied inside %s (%v): %s.\n",
			bytesize.Format(limit), s.engine, err, holds)
	}
	s.log.Warn("memory limit not applied; the kernel runs without one", "limit", bytesize.Format(limit), "why", err)
	return fmt.Sprintf("tfgpu-kernel: the memory limit of %s is not applied: %v. The kernel runs without one.\n", bytesize.Format(limit), err)
}

// containerLimitHolds says which memory limit holds a kernel inside
// container e, whose supervisor found layout l and outer around it (nil:
// no memory controller to read): the container's, with its figure; the
// host's cgroup's, for a rootless container on cgroup v1, which has none
// of its own; or none at all (engine.ContainerLimit).
func containerLimitHolds(e engine.Engine, l cgroup.Layout, outer *cgroup.OuterMemory) string {
	limit, dir := outer.Of()
	return e.ContainerLimit(limit, dir, l.V1["memory"] != "")
}

// outerMemLimit is the limit of the cgroups the supervisor started in, 0
// when there is none or it is not known.
func (s *supervisor) outerMemLimit() int64 {
	if s.outerMem == nil {
		return 0
	}
	return s.outerMem.Limit
}

// curveKeys reads the CurveZMQ key pair jupyter_client (>= 8.9, with
// transport_encryption auto or required, for a kernelspec that declares
// supported_encryption ["curve"]) writes into the connection file: nil when
// there is none. The outer sockets then speak CURVE with it; the kernel's
// own, inner sockets do not (docs/design.md#transport-encryption). Half a
// pair, a key that is not Z85, or a curve field jupyter_client does not
// write is an error naming the field, never a key.
func curveKeys(ci *jmsg.ConnInfo) (*zmtp.CurveKeys, error) {
	var pub, sec string
	var have []string
	for k, raw := range ci.Extra {
		if !strings.HasPrefix(k, "curve_") {
			continue
		}
		var v string
		switch k {
		case "curve_publickey":
			v = "public"
		case "curve_secretkey":
			v = "secret"
		default:
			return nil, fmt.Errorf("asks for transport encryption through %q, which tfgpu-kernel does not know "+
				"(it speaks CurveZMQ with curve_publickey and curve_secretkey)", record.Printable(k))
		}
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, fmt.Errorf("%s: not a string", k)
		}
		if v == "public" {
			pub = text
		} else {
			sec = text
		}
		have = append(have, k)
	}
	switch {
	case len(have) == 0:
		return nil, nil
	case len(have) == 1:
		return nil, fmt.Errorf("has %s without its pair (curve_publickey and curve_secretkey go together)", have[0])
	}
	keys, err := zmtp.ParseCurveKeys(pub, sec)
	if err != nil {
		return nil, fmt.Errorf("transport encryption: %v", err)
	}
	return keys, nil
}
