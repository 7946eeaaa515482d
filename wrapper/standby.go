package wrapper

// The spare kernel's adoption (docs/design.md#spare-kernel, issue 25).
//
// jupyter_client restarts a kernel by ending the supervisor's process and
// launching a new one, and only a process's own children can be
// supervised (exit status, parent-death signal, the subreaper's orphans).
// So a supervisor whose kernel is ready starts a standby supervisor (the
// same binary, `run --standby`, in a session of its own, outside the
// kernel's tree and cgroups) which starts a spare kernel (wrapper/spare)
// as its own kernel-to-be, in containment of its own, and listens on a
// unix socket in the state directory. The standby holds the read end of a
// pipe from the supervisor, the leash: "restart" on it, then its end,
// means a restart is coming (a restart's shutdown_request, or the kernel
// died and Jupyter's restarter may start it again); its end without
// "restart" means the standby and its spare go too.
//
// The next `run` Jupyter launches for the kernel connects to that socket
// first. It checks that the listener is a process of its own user
// (SO_PEERCRED) and holds it by a pidfd; the standby checks the same of
// the caller, that its connection file, argv and environment are those it
// stands by for, binds the five ports (free: jupyter_client launches the
// new process after the old one exited) and answers ok: from then on it
// is the kernel's supervisor, and the launched process a stub that
// forwards its signals (interrupts) and exits with the supervisor's code.
// The standby treats the end of the stub's connection as the end of its
// parent. Before that answer, any doubt means the launched process starts
// the kernel cold; after it, a spare that turns out stale, or holds a GPU
// context, is discarded and the standby starts the kernel cold itself.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/engine"
	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/wrapper/spare"
)

const (
	// DefaultSpareMaxAge is how long a spare waits before it is replaced
	// by a fresh one: what it imported may have changed on disk in ways
	// the sys.path check at adoption does not see.
	DefaultSpareMaxAge = 6 * time.Hour
	// adoptWindow is how long a standby waits for the next supervisor
	// after its own one ended for a restart: jupyter_client launches it
	// as soon as it has seen the old process exit, the server's restarter
	// within its 3 s poll of a dead kernel.
	adoptWindow = 10 * time.Second
	// connGoneFor is how long the connection file may be missing in that
	// window before the standby takes it for a shutdown (jupyter_client
	// removes it then; on a restart it rewrites it, remove and create).
	connGoneFor = 500 * time.Millisecond
	// adoptTimeout bounds the adoption as the launched process sees it:
	// the standby's checks and its bind take milliseconds.
	adoptTimeout = 5 * time.Second
	// spareImportTimeout bounds the spare's imports.
	spareImportTimeout = 2 * time.Minute
	// maxAdoptRequest bounds what a caller may make the standby read
	// (the environment is the bulk).
	maxAdoptRequest = 1 << 20
	// exitReplaceMe is a standby's exit code when its supervisor should
	// start a fresh one (its spare reached its maximum age).
	exitReplaceMe = 75
)

// standbyProc is a standby supervisor this supervisor started.
type standbyProc struct {
	pid    int
	leash  *os.File // the write end; closing it without "restart" ends the standby
	exited <-chan cgroup.ExitStatus
}

// adoptRequest is what the launched process sends a standby.
type adoptRequest struct {
	ConnFile string   `json:"conn_file"`
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	Cwd      string   `json:"cwd"`
}

// adoptReply is what a standby answers, and, once it was ok, the exit
// code it ends with.
type adoptReply struct {
	OK   bool   `json:"ok,omitempty"`
	Why  string `json:"why,omitempty"`
	Exit *int   `json:"exit,omitempty"`
}

// quietLog is a standby's log handler until it is adopted: its start-up
// lines below Warn (NVML, the engine, the containment) go out at Debug and
// are kept, and replay (Adopt) writes them as they were, so that each
// supervisor of a kernel says them once, and a standby that is never used
// says nothing.
type quietLog struct {
	slog.Handler
	q *quietState
}

type quietState struct {
	mu    sync.Mutex
	quiet bool
	kept  []keptRecord
}

type keptRecord struct {
	h slog.Handler
	r slog.Record
}

// maxKept bounds the start-up lines kept for the replay.
const maxKept = 32

func newQuietLog(lg *slog.Logger) (*slog.Logger, *quietState) {
	q := &quietState{quiet: true}
	return slog.New(quietLog{lg.Handler(), q}), q
}

func (h quietLog) Enabled(ctx context.Context, l slog.Level) bool {
	if l < slog.LevelWarn {
		h.q.mu.Lock()
		quiet := h.q.quiet
		h.q.mu.Unlock()
		if quiet {
			return true // kept for the replay
		}
	}
	return h.Handler.Enabled(ctx, l)
}

func (h quietLog) Handle(ctx context.Context, r slog.Record) error {
	h.q.mu.Lock()
	quiet := h.q.quiet && r.Level < slog.LevelWarn
	if quiet && r.Level >= slog.LevelInfo && len(h.q.kept) < maxKept {
		h.q.kept = append(h.q.kept, keptRecord{h.Handler, r.Clone()})
	}
	h.q.mu.Unlock()
	if quiet {
		r.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietLog) WithAttrs(as []slog.Attr) slog.Handler {
	return quietLog{h.Handler.WithAttrs(as), h.q}
}
func (h quietLog) WithGroup(n string) slog.Handler { return quietLog{h.Handler.WithGroup(n), h.q} }

// speak ends the quiet and writes the kept start-up lines as they were.
func (q *quietState) speak() {
	q.mu.Lock()
	kept := q.kept
	q.quiet, q.kept = false, nil
	q.mu.Unlock()
	for _, k := range kept {
		if k.h.Enabled(context.Background(), k.r.Level) {
			_ = k.h.Handle(context.Background(), k.r)
		}
	}
}

// checkSpare decides once whether this kernel keeps a spare (s.spareOff
// says why not) and logs it.
func (s *supervisor) checkSpare() {
	switch {
	case !s.cfg.Spare:
		s.spareOff = "turned off (--no-spare, TFGPU_SPARE=0)"
	case len(s.cfg.StandbyArgv) == 0:
		s.spareOff = "no standby program"
	}
	if s.spareOff == "" {
		if _, ok := spare.Parse(s.cfg.Argv); !ok {
			s.spareOff = "the kernel's command is not PYTHON -m ipykernel_launcher"
		}
	}
	if s.spareOff == "" {
		// A spare of this kernel held a GPU context: its imports
		// initialise CUDA, and every spare would.
		if sp := s.dir.ReadSpare(s.id); sp != nil && sp.GPU {
			s.spareOff = sp.Off
			s.log.Debug("no spare kernel", "why", s.spareOff)
			return
		}
	}
	if s.spareOff == "" && s.engine.Kind == engine.Container {
		if comm, ok := pid1Reaps(); !ok {
			s.spareOff = fmt.Sprintf("PID 1 of the container (%s) does not reap orphans: every restart would leave a zombie; run the container with --init", comm)
		}
	}
	if s.spareOff == "" {
		return
	}
	if s.cfg.Spare {
		s.log.Info("no spare kernel", "why", s.spareOff)
	}
}

// pid1Reaps reports whether PID 1 of this PID namespace is a program that
// waits for orphans: a standby that served a restart is re-parented to it
// and exits later. An interpreter or a server as PID 1 (a container run
// without --init) never does.
func pid1Reaps() (string, bool) {
	b, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		return "unknown", true
	}
	comm := strings.TrimSpace(string(b))
	for _, p := range []string{"python", "jupyter", "ipython", "node", "sleep", "bash", "sh"} {
		if comm == p || (len(p) > 2 && strings.HasPrefix(comm, p)) {
			return comm, false
		}
	}
	return comm, true
}

// startStandby starts the standby supervisor for this kernel's next
// restart, once the kernel is ready. Failures are logged; the kernel then
// restarts cold.
func (s *supervisor) startStandby() {
	if s.standby != nil || s.spareOff != "" {
		return
	}
	// This very binary, whatever is at its path now; outside the kernel's
	// cgroup and tree.
	pid, exited, pw, err := s.startSessionChild("/proc/self/exe", s.cfg.StandbyArgv, os.Environ(), 3)
	if err != nil {
		s.log.Warn("cannot start the standby for a spare kernel", "err", err)
		return
	}
	s.standby = &standbyProc{pid: pid, leash: pw, exited: exited}
	s.log.Debug("standby started", "pid", pid)
}

// standbyExited receives when the standby ended before it was needed.
func (s *supervisor) standbyExited() <-chan cgroup.ExitStatus {
	if s.standby == nil {
		return nil
	}
	return s.standby.exited
}

// standbyEnded notes the standby's end; one whose spare grew too old is
// replaced.
func (s *supervisor) standbyEnded(st cgroup.ExitStatus) {
	s.standby = nil
	if st.Code() == exitReplaceMe {
		s.startStandby()
		return
	}
	s.log.Debug("the standby ended", "code", st.Code())
}

// forgetSpareOff removes the record that this kernel keeps no spare as
// the kernel ends for good (not a restart: its next supervisors read it).
func (s *supervisor) forgetSpareOff() {
	if s.cfg.Standby && s.stub == nil {
		return // a standby that was not adopted: not the kernel's end
	}
	if !s.restarting {
		s.dir.RemoveSpare(s.id, 0)
	}
}

// endStandby tells the standby how this supervisor ends: for a restart
// it waits for the next supervisor (and this one does not wait for it to
// exit); otherwise it discards its spare and exits.
func (s *supervisor) endStandby(restart bool) {
	s.restarting = restart
	if s.standby == nil {
		return
	}
	if restart {
		if _, err := s.standby.leash.Write([]byte("restart\n")); err == nil {
			s.keepChild = s.standby.pid
		}
	}
	s.standby.leash.Close()
	s.standby = nil
}

// runStandby is `run --standby`: start a spare kernel in containment of
// its own, wait to be adopted, and then supervise the kernel it becomes.
func (s *supervisor) runStandby(ctx context.Context) int {
	if s.cfg.Leash == nil {
		return ExitUsage
	}
	leash := s.cfg.Leash
	s.onExit(func() { leash.Close() })
	// Last of all: the stub exits with this supervisor's code, once the
	// ports are closed and the tree is gone.
	s.onExit(s.tellStub)
	if code, ok := s.identify(); !ok {
		return code
	}
	l, ok := spare.Parse(s.cfg.Argv)
	if !ok {
		return ExitUsage
	}
	s.catchSignals(false)
	warning, code, ok := s.contain(false)
	if !ok {
		return code
	}
	sp, exited, err := s.startSpare(ctx, l)
	if err != nil {
		s.log.Warn("no spare kernel", "why", err)
		return ExitFailed
	}
	s.onExit(func() {
		if s.stub == nil {
			sp.Discard() // never adopted
		}
	})
	if held := s.spareHoldsGPU(); held != "" {
		mods := "ipykernel"
		if len(s.cfg.Preload) > 0 {
			mods += "," + strings.Join(s.cfg.Preload, ",")
		}
		s.log.Warn("the spare kernel holds a GPU context after its imports: discarded; this kernel restarts cold from now on",
			"holds", held, "imported", mods)
		// Its next supervisors keep none either (checkSpare).
		_ = s.dir.WriteSpare(record.Spare{KernelID: s.id, GPU: true, Preload: s.cfg.Preload,
			Off: fmt.Sprintf("a spare held a GPU context (%s) after importing %s", held, mods)})
		s.discardConfirmed(sp)
		return ExitFailed
	}
	// Recorded first (a socket without a record is swept as a dead
	// standby's), listening only now: a restart while the spare still
	// imports finds no socket and starts cold at once, rather than wait.
	s.log.Debug("spare kernel ready", "pid", sp.Pid(), "modules", sp.Modules)
	s.recordSpare(sp)
	ln, err := s.dir.ListenUnix(record.StandbyName(s.id))
	if err != nil {
		s.log.Warn("no spare kernel", "why", err)
		return ExitFailed
	}
	s.onExit(func() { ln.Close() })
	req, code := s.awaitAdoption(ctx, ln, leash, exited)
	if req == nil {
		return code
	}
	s.dir.RemoveSpare(s.id, os.Getpid()) // it is the kernel now
	ln.Close()
	leash.Close()
	return s.adopted(ctx, req, l, sp, exited, warning)
}

// recordSpare writes the spare's record for ps and doctor, removed as
// the standby ends or is adopted.
func (s *supervisor) recordSpare(sp *spare.Spare) {
	self, err1 := startTime(os.Getpid())
	start, err2 := startTime(sp.Pid())
	if err1 != nil || err2 != nil {
		return
	}
	if err := s.dir.WriteSpare(record.Spare{KernelID: s.id, StandbyPID: os.Getpid(), StandbyStart: self,
		PID: sp.Pid(), Start: start, Ready: time.Now().UTC(), Preload: s.cfg.Preload}); err != nil {
		s.log.Debug("cannot record the spare kernel", "err", err)
		return
	}
	s.onExit(func() { s.dir.RemoveSpare(s.id, os.Getpid()) })
}

// startSpare starts the spare kernel as this standby's kernel-to-be: in
// its tree, under its memory limit, with the kernel's environment.
func (s *supervisor) startSpare(ctx context.Context, l spare.Launch) (*spare.Spare, <-chan cgroup.ExitStatus, error) {
	if _, ok := s.tree.(cgroup.Launcher); ok {
		return nil, nil, errors.New("containment by a systemd scope starts the kernel's own program only")
	}
	path, err := exec.LookPath(l.Python)
	if err != nil {
		return nil, nil, err
	}
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.tree.Configure(sys); err != nil {
		return nil, nil, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, nil, err
	}
	defer devnull.Close()
	exited := make(chan cgroup.ExitStatus, 1)
	start := func(_ string, argv []string, attr *syscall.ProcAttr) (int, <-chan struct{}, error) {
		s.outerMem.Baseline()
		pid, es, err := s.reaper.StartProcess(path, argv, attr)
		if err != nil {
			return 0, nil, err
		}
		s.kpid = pid
		if s.mem != nil {
			if err := s.mem.Add(pid); err != nil {
				s.log.Warn("cannot put the spare kernel under its memory limit", "err", err)
			}
		}
		s.tree.Started(pid)
		gone := make(chan struct{})
		go func() {
			st := <-es
			exited <- st
			close(gone)
		}()
		return pid, gone, nil
	}
	attr := syscall.ProcAttr{Files: []uintptr{devnull.Fd(), os.Stdout.Fd(), os.Stderr.Fd()}, Sys: sys}
	ictx, cancel := context.WithTimeout(ctx, spareImportTimeout)
	defer cancel()
	sp, err := spare.Start(ictx, l, record.ShortID(s.id), s.kernelEnv(), s.cfg.Preload, attr, start)
	if err != nil {
		return nil, nil, err
	}
	if st, err := s.describe(); err == nil {
		s.watch.send(watchMsg{Record: &st}) // its watcher kills the spare should the standby be SIGKILLed
	}
	return sp, exited, nil
}

// spareHoldsGPU names the GPU contexts the spare's tree holds ("" when
// none, or when the GPU is not watched): an import that initialised CUDA.
func (s *supervisor) spareHoldsGPU() string {
	hs, ok := s.gpu.holders()
	if !ok {
		return ""
	}
	pids, err := s.tree.Pids()
	if err != nil {
		pids = []int{s.kpid}
	}
	var held []string
	for _, h := range hs {
		if slices.Contains(pids, h.PID) {
			held = append(held, fmt.Sprintf("GPU%d pid %d", h.Device, h.PID))
		}
	}
	return strings.Join(held, ", ")
}

// awaitAdoption waits until the next supervisor of the kernel asks for
// the spare (its request), or the standby is to end (nil and the code).
func (s *supervisor) awaitAdoption(ctx context.Context, ln *net.UnixListener, leash *os.File, spareExited <-chan cgroup.ExitStatus) (*adoptRequest, int) {
	conns := make(chan *net.UnixConn)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			select {
			case conns <- c:
			case <-stop:
				c.Close()
				return
			}
		}
	}()
	said := make(chan string, 2)
	go func() {
		r := bufio.NewReader(io.LimitReader(leash, 64))
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				said <- "end"
				return
			}
			said <- strings.TrimSpace(line)
		}
	}()
	maxAge := time.NewTimer(s.cfg.SpareMaxAge)
	defer maxAge.Stop()
	var window <-chan time.Time
	var tick <-chan time.Time // in the window: the connection file, the server
	var missingSince time.Time
	restart := false
	for {
		select {
		case c := <-conns:
			req, err := s.readAdoption(c)
			if err != nil {
				// The caller starts the kernel cold, with a standby of its
				// own: this one and its spare go.
				s.log.Warn("refused a request for the spare kernel", "why", err)
				s.answer(c, adoptReply{Why: err.Error()})
				c.Close()
				return nil, ExitFailed
			}
			s.stub = c
			return req, 0
		case w := <-said:
			switch {
			case w == "restart":
				restart = true
				maxAge.Stop() // the next supervisor comes: no replacing now
			case w != "end":
				s.log.Debug("the supervisor said something unknown on the leash", "said", w)
			case restart:
				window = time.After(adoptWindow)
				t := time.NewTicker(100 * time.Millisecond)
				defer t.Stop()
				tick = t.C
				said = nil
			default:
				return nil, ExitOK // shut down, stopped, or gone: the spare goes too
			}
		case <-window:
			s.log.Debug("no supervisor came for the spare kernel after the restart", "waited", adoptWindow)
			return nil, ExitOK
		case now := <-tick:
			// A dead kernel that is shut down, not restarted, or the
			// server gone: nobody will come.
			if _, err := os.Stat(s.cfg.ConnFile); err == nil {
				missingSince = time.Time{}
			} else if missingSince.IsZero() {
				missingSince = now
			} else if now.Sub(missingSince) >= connGoneFor {
				s.log.Debug("the connection file is gone: the kernel was shut down, not restarted")
				return nil, ExitOK
			}
			if jupyterParentGone() {
				return nil, ExitOK
			}
		case st := <-spareExited:
			s.log.Warn("the spare kernel exited while waiting", "code", st.Code())
			return nil, ExitFailed
		case <-maxAge.C:
			s.log.Info("the spare kernel is replaced by a fresh one", "age", s.cfg.SpareMaxAge)
			return nil, exitReplaceMe
		case sig := <-s.sigc:
			if sig == unix.SIGTERM || sig == unix.SIGHUP {
				return nil, ExitOK
			}
		case <-ctx.Done():
			return nil, ExitOK
		}
	}
}

// readAdoption reads and checks a request for the spare: from a process
// of this user, for this kernel's connection file, argv and environment.
func (s *supervisor) readAdoption(c *net.UnixConn) (*adoptRequest, error) {
	cred, err := record.PeerCred(c)
	if err != nil {
		return nil, fmt.Errorf("no peer credentials: %w", err)
	}
	if int(cred.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("the caller (pid %d) is uid %d, not uid %d", cred.Pid, cred.Uid, os.Geteuid())
	}
	_ = c.SetDeadline(time.Now().Add(adoptTimeout))
	var req adoptRequest
	if err := json.NewDecoder(io.LimitReader(c, maxAdoptRequest)).Decode(&req); err != nil {
		return nil, fmt.Errorf("unreadable request: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	switch {
	case req.ConnFile != s.cfg.ConnFile:
		return nil, fmt.Errorf("for connection file %q, not %q", record.Printable(req.ConnFile), s.cfg.ConnFile)
	case !slices.Equal(req.Argv, s.cfg.Argv):
		return nil, errors.New("the kernel's command changed")
	case !filepath.IsAbs(req.Cwd):
		return nil, errors.New("no working directory")
	}
	if diff := envDiff(req.Env, os.Environ()); len(diff) > 0 {
		return nil, fmt.Errorf("the environment changed: %s", strings.Join(diff, ", "))
	}
	return &req, nil
}

// envDiff names the variables that differ between two environments (at
// most five; values are never named).
func envDiff(a, b []string) []string {
	ma, mb := envMap(a), envMap(b)
	var diff []string
	for k, v := range ma {
		if w, ok := mb[k]; !ok || w != v {
			diff = append(diff, record.Printable(k))
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			diff = append(diff, record.Printable(k))
		}
	}
	slices.Sort(diff)
	if len(diff) > 5 {
		diff = append(diff[:5], "…")
	}
	return diff
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// answer writes one reply to c.
func (s *supervisor) answer(c *net.UnixConn, r adoptReply) error {
	b, _ := json.Marshal(r)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := c.Write(append(b, '\n'))
	return err
}

// adopted is the standby becoming the kernel's supervisor: bind the
// ports, answer ok, hand the spare the kernel's argv (or, should it be
// stale or hold a GPU context now, start the kernel cold), and serve.
func (s *supervisor) adopted(ctx context.Context, req *adoptRequest, l spare.Launch, sp *spare.Spare, exited <-chan cgroup.ExitStatus, warning string) int {
	ci, curve, code, ok := s.loadConn()
	if ok {
		code, ok = s.bind(ctx, ci, curve)
	}
	if !ok {
		// The launched process starts the kernel cold; a usage error it
		// will report itself.
		s.answer(s.stub, adoptReply{Why: "cannot take the kernel's connection file and ports"})
		s.stub.Close()
		s.stub = nil
		return code
	}
	if err := s.answer(s.stub, adoptReply{OK: true}); err != nil {
		s.log.Warn("the process that asked for the spare kernel is gone", "err", err)
		return ExitFailed
	}
	s.watchStub()
	if s.quiet != nil {
		s.quiet.speak()
	}
	s.log.Info("took over the kernel's start with a spare kernel", "launched", stubPid(s.stub))
	warning = s.beforeKernel(s.sweep() + warning)
	inner := s.innerDir + "/" + innerConnName
	argv := substituteConn(s.cfg.Argv, s.cfg.ConnFile, inner)
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := errors.New("it holds a GPU context")
	if held := s.spareHoldsGPU(); held == "" {
		err = sp.Go(gctx, append([]string{"ipykernel_launcher"}, substituteConn(l.Args, s.cfg.ConnFile, inner)...), req.Cwd)
	}
	if err != nil {
		s.log.Info("the spare kernel is not used; starting the kernel cold", "why", err)
		s.discardConfirmed(sp)
		s.kpid = 0
		if exited, code = s.spawn(argv); exited == nil {
			return code
		}
	}
	s.started(ctx, warning)
	return s.serve(ctx, exited, 0)
}

// discardConfirmed ends a spare that is not to be the kernel, kills what
// is left of its tree, and, should it have held a GPU context, waits for
// NVML to confirm its release, as for any tree.
func (s *supervisor) discardConfirmed(sp *spare.Spare) {
	old := s.gpu.watch(s.tree, s.kpid)
	sp.Discard()
	if _, _, err := s.killTree(); err != nil {
		s.log.Warn("cannot kill what the spare kernel left", "err", err)
	}
	s.gpu.confirm("spare discarded", old)
}

// watchStub closes stubGone when the launched process's connection ends:
// it exited or was killed, as the parent of a supervisor does.
func (s *supervisor) watchStub() {
	s.stubGone = make(chan struct{})
	go func(c *net.UnixConn, gone chan struct{}) {
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<10))
		close(gone)
	}(s.stub, s.stubGone)
}

// tellStub sends the launched process the exit code, last of all.
func (s *supervisor) tellStub() {
	if s.stub == nil {
		return
	}
	code := s.code
	s.answer(s.stub, adoptReply{Exit: &code})
	s.stub.Close()
}

func stubPid(c *net.UnixConn) int {
	if cred, err := record.PeerCred(c); err == nil {
		return int(cred.Pid)
	}
	return 0
}

// adopt is a launched supervisor's first step with the spare on: ask the
// kernel's standby to take over. true: it did, and the returned code is
// its supervision's, which this process (now a stub) exits with.
func (s *supervisor) adopt() (int, bool) {
	id := jmsg.KernelID(s.cfg.ConnFile)
	if !record.ValidKernelID(id) || s.cfg.StateDir == "" {
		return 0, false
	}
	log := s.cfg.Log.With("kernel", record.ShortID(id))
	d, err := record.OpenDir(s.cfg.StateDir, false, false)
	if err != nil {
		return 0, false
	}
	defer d.Close()
	c, err := d.DialUnix(record.StandbyName(id), time.Second)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			log.Debug("no standby to take over the kernel's start", "err", err)
		}
		return 0, false
	}
	defer c.Close()
	cred, err := record.PeerCred(c)
	if err != nil || int(cred.Uid) != os.Geteuid() || cred.Pid <= 0 {
		log.Warn("refused the standby socket: not a process of this user", "socket", d.Path()+"/"+record.StandbyName(id), "peer", fmt.Sprintf("%+v", cred))
		return 0, false
	}
	// Held by a pidfd from now on: its answer, later, proves the pid was
	// still the standby's when the pidfd was opened.
	pidfd, err := unix.PidfdOpen(int(cred.Pid), 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(pidfd)
	cwd, _ := os.Getwd()
	req, _ := json.Marshal(adoptRequest{ConnFile: s.cfg.ConnFile, Argv: s.cfg.Argv, Env: os.Environ(), Cwd: cwd})
	_ = c.SetDeadline(time.Now().Add(adoptTimeout))
	if _, err := c.Write(append(req, '\n')); err != nil {
		return 0, false
	}
	r := bufio.NewReader(io.LimitReader(c, 1<<16))
	var rep adoptReply
	line, err := r.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	if err != nil || !rep.OK {
		why := rep.Why
		if err != nil {
			why = err.Error()
		}
		log.Info("the standby did not take over; starting the kernel cold", "standby", cred.Pid, "why", why)
		c.Close()
		waitPidfd(pidfd, s.cfg.KillTimeout+time.Second) // its ports, should it have bound them, are free again
		return 0, false
	}
	_ = c.SetDeadline(time.Time{})
	log.Info("the kernel's standby supervisor took over; this process forwards signals to it", "supervisor", cred.Pid)
	return stubWait(r, pidfd, log), true
}

// stubWait is the stub's life: forward SIGINT, SIGTERM and SIGHUP to the
// supervisor that took over, end when it sends its exit code (or dies), or
// when this process's parent dies (the supervisor then sees the
// connection end).
func stubWait(r *bufio.Reader, pidfd int, log interface{ Warn(string, ...any) }) int {
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, parentDeathSignal)
	defer signal.Stop(sigc)
	defer watchParent()()
	codes := make(chan int, 1)
	go func() {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				close(codes)
				return
			}
			var rep adoptReply
			if json.Unmarshal(line, &rep) == nil && rep.Exit != nil {
				codes <- *rep.Exit
				return
			}
		}
	}()
	if parentGone() {
		return ExitFailed
	}
	for {
		select {
		case code, ok := <-codes:
			if !ok {
				log.Warn("the supervisor that took over ended without an exit code")
				return ExitFailed
			}
			return code
		case sig := <-sigc:
			if sig == parentDeathSignal {
				if parentGone() {
					return ExitOK
				}
				continue
			}
			if err := unix.PidfdSendSignal(pidfd, sig.(unix.Signal), nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				log.Warn("cannot forward a signal to the supervisor that took over", "signal", sig, "err", err)
			}
		}
	}
}

// waitPidfd waits until the process of pidfd exits, for at most d.
func waitPidfd(pidfd int, d time.Duration) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	_, _ = unix.Poll(fds, int(d/time.Millisecond))
}
