package wrapper

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// The watcher closes the SIGKILL hole. jupyter_client's
// shutdown_kernel(now=True) and restart_kernel(now=True), its own SIGKILL
// escalation, `kill -9` and the OOM killer end the supervisor without a
// chance to act; the kernel dies of its parent-death signal, but setsid'd
// workers that ignore SIGTERM live on in the kernel's cgroup with their
// GPU memory. So each supervisor starts a watcher: the same binary, in a
// session of its own (a killpg of the supervisor's group does not reach
// it), outside the kernel's cgroup and not counted in its process tree,
// reading a pipe from the supervisor. While the supervisor lives it does
// nothing but wait on that read. The supervisor sends it what it records
// about the kernel as it goes; on a clean stop it says "done" and the
// watcher leaves. When the pipe ends without "done" the supervisor is
// gone, and the watcher finishes the kernel as `tfgpu-kernel stop` would:
// kill the tree, remove its cgroups and inner directory, remove its record
// if it is still that supervisor's, and confirm through NVML that its GPU
// memory is back, within about a second. The next start of a kernel
// (sweep) remains the second line.
//
// It never touches a tree a live supervisor owns: it acts only on what
// its own supervisor sent, and every cgroup is named after the supervisor
// that made it (cgroupName), so the next supervisor of the same kernel,
// which jupyter_client starts at once after restart_kernel(now=True),
// has cgroups of its own.

// WatchCommand is the hidden role of the program that makes it a watcher:
// `PROGRAM watch KERNEL_ID`, reading the supervisor's messages on stdin.
// The binary's main (and the tests' TestMain) call Watch then.
const WatchCommand = "watch"

// watchMsg is one line on the pipe.
type watchMsg struct {
	Config   *watchConfig  `json:"config,omitempty"`
	Record   *record.State `json:"record,omitempty"`
	Baseline []gpu.Holder  `json:"baseline,omitempty"`
	// Tree is what a proc-mode tree is now (record.State.Tree).
	Tree []proc.Ref `json:"tree,omitempty"`
	Done bool       `json:"done,omitempty"`
}

type watchConfig struct {
	StateDir       string        `json:"state_dir"`
	NVMLLibrary    string        `json:"nvml_library,omitempty"`
	Visible        string        `json:"visible,omitempty"`
	KillTimeout    time.Duration `json:"kill_timeout"`
	ConfirmTimeout time.Duration `json:"confirm_timeout"`
	LogLevel       slog.Level    `json:"log_level"`
}

// watcher is the supervisor's end of the pipe.
type watcher struct {
	mu  sync.Mutex // send is called from the tree tracker too
	w   *os.File
	enc *json.Encoder
	pid int
	// exited receives the watcher's exit status: done waits for it, so
	// that the watcher is reaped by its parent, not left to PID 1.
	exited <-chan proc.ExitStatus
}

// startSessionChild starts path (argv, env) through the reaper, in a
// session of its own (a killpg of the supervisor's group, Jupyter's
// interrupt, does not reach it), outside the kernel's tree, in the
// supervisor's working directory (inherited; a chdir could only fail),
// with the read end of a new pipe at fd pipeFD (0, or 3 after /dev/null,
// stdout and stderr) and the supervisor's stderr. It returns the pipe's write end.
func (s *supervisor) startSessionChild(path string, argv, env []string, pipeFD int) (int, <-chan proc.ExitStatus, *os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, nil, nil, err
	}
	defer pr.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		pw.Close()
		return 0, nil, nil, err
	}
	defer devnull.Close()
	files := []uintptr{pr.Fd(), devnull.Fd(), os.Stderr.Fd()}
	if pipeFD == 3 {
		files = []uintptr{devnull.Fd(), os.Stdout.Fd(), os.Stderr.Fd(), pr.Fd()}
	}
	attr := &syscall.ProcAttr{Env: env, Files: files, Sys: &syscall.SysProcAttr{Setsid: true}}
	pid, exited, err := s.reaper.StartProcess(path, argv, attr)
	if err != nil {
		pw.Close()
		return 0, nil, nil, err
	}
	return pid, exited, pw, nil
}

// startWatcher starts the watcher (see above) through the reaper, which
// keeps it out of the proc tree and reaps it. A watcher that cannot start
// is logged; the next start of a kernel is then the only line.
func (s *supervisor) startWatcher() {
	exe, err := os.Executable()
	if err == nil {
		env := append(withoutEnv(os.Environ(), "TFGPU_WATCHER"), "GOMAXPROCS=1")
		var pid int
		var exited <-chan proc.ExitStatus
		var pw *os.File
		if pid, exited, pw, err = s.startSessionChild(exe, []string{exe, WatchCommand, s.id}, env, 0); err == nil {
			s.watch = &watcher{w: pw, enc: json.NewEncoder(pw), pid: pid, exited: exited}
		}
	}
	if err != nil {
		s.log.Warn("cannot start the watcher; a SIGKILLed supervisor's tree waits for the next start", "err", err)
		return
	}
	visible, _ := visibleDevices()
	level := slog.LevelInfo
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if s.cfg.Log.Enabled(context.Background(), l) { // not a standby's quiet log
			level = l
			break
		}
	}
	s.watch.send(watchMsg{Config: &watchConfig{StateDir: s.dir.Path(), NVMLLibrary: s.cfg.NVMLLibrary, Visible: visible,
		KillTimeout: s.cfg.KillTimeout, ConfirmTimeout: s.cfg.ConfirmTimeout, LogLevel: level}})
	s.log.Debug("watcher started", "pid", s.watch.pid)
}

func (w *watcher) send(m watchMsg) {
	if w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		_ = w.enc.Encode(m) // a watcher that died is a watcher that will not act
	}
}

// done tells the watcher the supervisor stopped the kernel itself, and
// waits (a second at most) until it has left and been reaped: a watcher
// that outlived its supervisor would be re-parented to PID 1, which in a
// container without --init never reaps it (#24).
func (w *watcher) done() {
	if w != nil {
		w.send(watchMsg{Done: true})
		w.mu.Lock()
		w.w.Close()
		w.mu.Unlock()
		select {
		case <-w.exited:
		case <-time.After(time.Second):
		}
	}
}

// Watch is the watcher's main: it reads the supervisor's messages from in
// until the pipe ends, then, unless the supervisor said "done", finishes
// the kernel. It returns the process exit code.
func Watch(in io.Reader, stderr io.Writer) int {
	var cfg watchConfig
	var rec *record.State
	var baseline []gpu.Holder
	var tree []proc.Ref
	done := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var m watchMsg
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch {
		case m.Config != nil:
			cfg = *m.Config
		case m.Record != nil:
			rec = m.Record
		case m.Baseline != nil:
			baseline = m.Baseline
		case m.Tree != nil:
			tree = m.Tree
		}
		done = done || m.Done
	}
	if done || rec == nil || cfg.StateDir == "" {
		return 0
	}
	if tree != nil {
		rec.Tree = tree
	}
	lg := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel})).With(
		"prog", "tfgpu-kernel", "kernel", record.ShortID(rec.KernelID), "watcher", os.Getpid())
	finishForDeadSupervisor(lg, cfg, *rec, baseline)
	return 0
}

// finishForDeadSupervisor is what the watcher does once its supervisor is
// gone: finish its kernel as the next start would (record.FinishKernel),
// then confirm the GPU release.
func finishForDeadSupervisor(lg *slog.Logger, cfg watchConfig, st record.State, baseline []gpu.Holder) {
	start := time.Now()
	st.Owner = os.Geteuid()
	// The pipe ends when the dying supervisor's files are closed, a moment
	// before the kernel marks it a zombie; Finish (rightly) spares the tree
	// of a supervisor that still looks alive, so wait for that moment.
	for st.SupervisorAlive() && time.Since(start) < time.Second {
		time.Sleep(time.Millisecond)
	}
	g := &gpuCheck{sess: gpu.Connect(cfg.NVMLLibrary, cfg.Visible), log: lg, timeout: cfg.ConfirmTimeout}
	defer g.close()
	d, err := record.OpenDir(cfg.StateDir, false, false)
	if err != nil {
		lg.Error("the supervisor died and its kernel cannot be finished", "err", err)
		return
	}
	defer d.Close()
	var also []int
	if st.KernelPID > 0 {
		also = []int{st.KernelPID} // killed by its parent-death signal; its context may linger
	}
	f, err := d.FinishKernel(st, record.FinishOptions{GPU: g.sess, Baseline: baseline, AlsoPids: also,
		KillTimeout: cfg.KillTimeout, ConfirmTimeout: cfg.ConfirmTimeout})
	attrs := []any{"dead_supervisor", st.SupervisorPID, "processes_killed", f.Killed, "killed_in", f.Took.Round(time.Millisecond)}
	if err != nil {
		lg.Error("the supervisor died; its kernel was not finished", append(attrs, "err", err)...)
		return
	}
	lg.Warn("the supervisor died (SIGKILL?); finished its kernel", attrs...)
	if f.GPU != nil {
		g.report("supervisor died", *f.GPU, f.GPUErr)
	}
}

// trackTree tells the watcher, every treeTrackEvery while ctx lasts, what
// a proc-mode tree is (record.State.Tree), when it changed: once the
// supervisor is SIGKILLed those processes and their descendants are found
// by /proc/PID/stat, which no process can hide, where the marker in an
// environment a non-dumpable process hides is not. A process forked and
// hidden within the last period before the SIGKILL is not known.
func (s *supervisor) trackTree(ctx context.Context, tree cgroup.Tree) {
	t := time.NewTicker(treeTrackEvery)
	defer t.Stop()
	var last []proc.Ref
	for {
		pids, err := tree.Pids()
		if err == nil {
			refs := make([]proc.Ref, 0, len(pids))
			for _, p := range pids {
				if start, err := startTime(p); err == nil {
					refs = append(refs, proc.Ref{PID: p, Start: start})
				}
			}
			if !slices.Equal(refs, last) {
				s.watch.send(watchMsg{Tree: refs})
				s.log.Debug("told the watcher the tree", "processes", len(refs))
				last = refs
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// treeTrackEvery is how often trackTree looks (a /proc scan).
const treeTrackEvery = time.Second
