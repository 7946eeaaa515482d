package wrapper

// The standby: a supervisor-to-be for its kernel's next restart
// (docs/design.md#spare-kernel, #processes).
//
// jupyter_client restarts a kernel by ending the supervisor's process and
// launching a new one, and only a process's own children can be
// supervised (exit status, parent-death signal, the subreaper's orphans).
// So a supervisor whose kernel is ready starts a standby (the same binary,
// `tfgpu-kernel standby ID`, in a session of its own, outside the
// kernel's tree and cgroups; sparekeep.go) which starts a spare kernel
// (wrapper/spare) as its own kernel-to-be, in containment of its own, and
// listens on a unix socket in the state directory. The standby holds the
// read end of a pipe from the supervisor, the leash: its first line is
// run's arguments (cmd/tfgpu-kernel reads it); "restart" on it, then its
// end, means a restart is coming (a restart's shutdown_request, or the
// kernel died and Jupyter's restarter may start it again); its end
// without "restart" means the standby and its spare go too.
//
// The next `run` Jupyter launches for the kernel connects to that socket
// first (stub.go). The standby checks the caller's uid, that its
// connection file, argv and environment are those it stands by for, binds
// the five ports (free: jupyter_client launches the new process after the
// old one exited) and answers ok: from then on it is the kernel's
// supervisor, and the launched process its stub. Before that answer, any
// doubt means the launched process starts the kernel cold; after it, a
// spare that turns out stale, or holds a GPU context, is discarded and the
// standby starts the kernel cold itself.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
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

// standby is a standby until it is adopted: the supervisor it then
// becomes (s), the spare it keeps and the leash it waits on.
type standby struct {
	s      *supervisor
	leash  *os.File
	launch spare.Launch
	spare  *spare.Spare
	exited <-chan proc.ExitStatus // the spare's
	quiet  *quietState            // its start-up lines, said once it is adopted
	said   chan string            // the leash's lines, then "end" (readLeash)
}

// readLeash reads the leash from the standby's start: its lines, then
// "end", go to b.said in order, for await. The leash ending before a
// "restart" (the supervisor shut down, stopped or gone) cancels the
// spare's start at once (the returned context): a spare still importing
// under load could otherwise outlive a Slurm job by seconds
// (TestE2ESlurm under -race) before await saw the end.
func (b *standby) readLeash(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	b.said = make(chan string, 8) // 64 bytes of leash: a few lines at most
	go func() {
		r := bufio.NewReader(io.LimitReader(b.leash, 64))
		restart := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				b.said <- "end"
				if !restart {
					cancel()
				}
				return
			}
			w := strings.TrimSpace(line)
			restart = restart || w == "restart"
			b.said <- w
		}
	}()
	return ctx, cancel
}

// runStandby is `tfgpu-kernel standby`: start a spare kernel in
// containment of its own, wait to be adopted, and then supervise the
// kernel it becomes.
func (s *supervisor) runStandby(ctx context.Context) int {
	if s.cfg.Leash == nil {
		return ExitUsage
	}
	b := &standby{s: s, leash: s.cfg.Leash}
	s.onExit(func() { b.leash.Close() })
	// Last of all: the stub exits with this supervisor's code, once the
	// ports are closed and the tree is gone.
	s.onExit(s.tellStub)
	if code, ok := s.identify(); !ok {
		return code
	}
	s.log, b.quiet = newQuietLog(s.log.With("standby", os.Getpid()))
	var ok bool
	if b.launch, ok = spare.Parse(s.cfg.Argv); !ok {
		return ExitUsage
	}
	s.catchSignals(false)
	warning, code, ok := s.contain(false)
	if !ok {
		return code
	}
	sctx, cancel := b.readLeash(ctx)
	defer cancel()
	if err := b.startSpare(sctx); err != nil {
		if sctx.Err() != nil && ctx.Err() == nil {
			s.log.Debug("the supervisor ended while the spare kernel started: no spare", "why", err)
			return ExitOK
		}
		s.log.Warn("no spare kernel", "why", err)
		return ExitFailed
	}
	s.onExit(func() {
		if s.stub == nil {
			b.spare.Discard() // never adopted
		}
	})
	if held := s.treeHoldsGPU(); held != "" {
		mods := "ipykernel"
		if len(s.cfg.Preload) > 0 {
			mods += "," + strings.Join(s.cfg.Preload, ",")
		}
		s.log.Warn("the spare kernel holds a GPU context after its imports: discarded; this kernel restarts cold from now on",
			"holds", held, "imported", mods)
		// Its next supervisors keep none either (checkSpare).
		_ = s.dir.WriteSpare(record.Spare{KernelID: s.id, GPU: true, Preload: s.cfg.Preload,
			Off: fmt.Sprintf("a spare held a GPU context (%s) after importing %s", held, mods)})
		s.discardConfirmed(b.spare)
		return ExitFailed
	}
	// Recorded first (a socket without a record is swept as a dead
	// standby's), listening only now: a restart while the spare still
	// imports finds no socket and starts cold at once, rather than wait.
	s.log.Debug("spare kernel ready", "pid", b.spare.Pid(), "modules", b.spare.Modules)
	b.record()
	ln, err := s.dir.ListenUnix(record.StandbyName(s.id))
	if err != nil {
		s.log.Warn("no spare kernel", "why", err)
		return ExitFailed
	}
	s.onExit(func() { ln.Close() })
	req, code := b.await(ctx, ln)
	if req == nil {
		return code
	}
	s.dir.RemoveSpare(s.id, os.Getpid()) // it is the kernel now
	ln.Close()
	b.leash.Close()
	return b.adopted(ctx, req, warning)
}

// record writes the spare's record for ps, doctor and Census (its
// standby, watcher, spare and cgroups), removed as the standby ends or is
// adopted.
func (b *standby) record() {
	s := b.s
	self, err1 := startTime(os.Getpid())
	start, err2 := startTime(b.spare.Pid())
	if err1 != nil || err2 != nil {
		return
	}
	sp := record.Spare{KernelID: s.id, StandbyPID: os.Getpid(), StandbyStart: self,
		PID: b.spare.Pid(), Start: start, Ready: time.Now().UTC(), Preload: s.cfg.Preload,
		Watcher: s.watcherRef(), Cgroup: s.tree.Dir(), MemoryCgroup: s.memoryCgroup()}
	if err := s.dir.WriteSpare(sp); err != nil {
		s.log.Debug("cannot record the spare kernel", "err", err)
		return
	}
	s.onExit(func() { s.dir.RemoveSpare(s.id, os.Getpid()) })
}

// startSpare starts the spare kernel as this standby's kernel-to-be: in
// its tree, under its memory limit, with the kernel's environment.
func (b *standby) startSpare(ctx context.Context) error {
	s := b.s
	if _, ok := s.tree.(cgroup.Launcher); ok {
		return errors.New("containment by a systemd scope starts the kernel's own program only")
	}
	path, err := exec.LookPath(b.launch.Python)
	if err != nil {
		return err
	}
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.tree.Configure(sys); err != nil {
		return err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	exited := make(chan proc.ExitStatus, 1)
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
	sp, err := spare.Start(ictx, b.launch, record.ShortID(s.id), s.kernelEnv(), s.cfg.Preload, attr, start)
	if err != nil {
		return err
	}
	b.spare, b.exited = sp, exited
	if st, err := s.describe(); err == nil {
		s.watch.send(watchMsg{Record: &st}) // its watcher kills the spare should the standby be SIGKILLed
	}
	return nil
}

// await waits until the next supervisor of the kernel asks for the spare
// (its request), or the standby is to end (nil and the code).
func (b *standby) await(ctx context.Context, ln *net.UnixListener) (*adoptRequest, int) {
	s := b.s
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
	said := b.said
	maxAge := time.NewTimer(s.cfg.SpareMaxAge)
	defer maxAge.Stop()
	var window <-chan time.Time
	var tick <-chan time.Time // in the window: the connection file, the server
	var missingSince time.Time
	restart := false
	for {
		select {
		case c := <-conns:
			req, err := readAdoption(c, s.cfg)
			if err != nil {
				// The caller starts the kernel cold, with a standby of its
				// own: this one and its spare go.
				s.log.Warn("refused a request for the spare kernel", "why", err)
				answer(c, adoptReply{Why: err.Error()})
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
		case st := <-b.exited:
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

// readAdoption reads and checks a request for the spare of the kernel cfg
// runs: from a process of this user, for its connection file, argv and
// environment.
func readAdoption(c *net.UnixConn, cfg Config) (*adoptRequest, error) {
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
	case req.ConnFile != cfg.ConnFile:
		return nil, fmt.Errorf("for connection file %q, not %q", record.Printable(req.ConnFile), cfg.ConnFile)
	case !slices.Equal(req.Argv, cfg.Argv):
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

// adopted is the standby becoming the kernel's supervisor: bind the
// ports, answer ok, hand the spare the kernel's argv (or, should it be
// stale or hold a GPU context now, start the kernel cold), and serve.
func (b *standby) adopted(ctx context.Context, req *adoptRequest, warning string) int {
	s := b.s
	ci, curve, code, ok := s.loadConn()
	if ok {
		code, ok = s.bind(ctx, ci, curve)
	}
	if !ok {
		// The launched process starts the kernel cold; a usage error it
		// will report itself.
		answer(s.stub, adoptReply{Why: "cannot take the kernel's connection file and ports"})
		s.stub.Close()
		s.stub = nil
		return code
	}
	if err := answer(s.stub, adoptReply{OK: true}); err != nil {
		s.log.Warn("the process that asked for the spare kernel is gone", "err", err)
		return ExitFailed
	}
	s.watchStub()
	b.quiet.speak()
	launched := 0
	if s.stubRef != nil {
		launched = s.stubRef.PID
	}
	s.log.Info("took over the kernel's start with a spare kernel", "launched", launched)
	warning = s.beforeKernel(s.sweep() + warning)
	inner := s.innerDir + "/" + innerConnName
	argv := substituteConn(s.cfg.Argv, s.cfg.ConnFile, inner)
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := errors.New("it holds a GPU context")
	exited := b.exited
	if held := s.treeHoldsGPU(); held == "" {
		err = b.spare.Go(gctx, append([]string{"ipykernel_launcher"}, substituteConn(b.launch.Args, s.cfg.ConnFile, inner)...), req.Cwd, s.placedEnv())
	}
	if err != nil {
		s.log.Info("the spare kernel is not used; starting the kernel cold", "why", err)
		s.discardConfirmed(b.spare)
		s.kpid = 0
		if exited, code = s.spawn(argv); exited == nil {
			return code
		}
	}
	s.started(ctx, warning)
	return s.serve(ctx, exited, 0)
}
