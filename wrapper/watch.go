package wrapper

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
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
// (reapDead) remains the second line.
//
// It never touches a tree a live supervisor owns: it acts only on what
// its own supervisor sent, and every cgroup is named after the supervisor
// that made it (cgroupName), so the next supervisor of the same kernel,
// which jupyter_client starts at once after restart_kernel(now=True),
// has cgroups of its own.

// watcherEnv marks the process that is to be a watcher: the binary's
// main (and the tests' TestMain) call Watch when it is "1".
const watcherEnv = "TFGPU_WATCHER"

// IsWatcher reports whether this process was started as a watcher.
func IsWatcher() bool { return os.Getenv(watcherEnv) == "1" }

// watchMsg is one line on the pipe.
type watchMsg struct {
	Config   *watchConfig `json:"config,omitempty"`
	Record   *State       `json:"record,omitempty"`
	Baseline []gpu.Holder `json:"baseline,omitempty"`
	Done     bool         `json:"done,omitempty"`
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
	w   *os.File
	enc *json.Encoder
	pid int
}

// startWatcher starts the watcher (see above) through the reaper, which
// keeps it out of the proc tree and reaps it. A watcher that cannot start
// is logged; the next start of a kernel is then the only line.
func (s *supervisor) startWatcher(r *cgroup.Reaper) {
	exe, err := os.Executable()
	if err != nil {
		s.log.Warn("cannot start the watcher; a SIGKILLed supervisor's tree waits for the next start", "err", err)
		return
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		s.log.Warn("cannot start the watcher; a SIGKILLed supervisor's tree waits for the next start", "err", err)
		return
	}
	defer pr.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		pw.Close()
		return
	}
	defer devnull.Close()
	env := append(withoutEnv(os.Environ(), watcherEnv), watcherEnv+"=1", "GOMAXPROCS=1")
	attr := &syscall.ProcAttr{Env: env, Files: []uintptr{pr.Fd(), devnull.Fd(), os.Stderr.Fd()},
		Sys: &syscall.SysProcAttr{Setsid: true}}
	pid, _, err := r.StartProcess(exe, []string{exe}, attr)
	if err != nil {
		pw.Close()
		s.log.Warn("cannot start the watcher; a SIGKILLed supervisor's tree waits for the next start", "err", err)
		return
	}
	s.watch = &watcher{w: pw, enc: json.NewEncoder(pw), pid: pid}
	visible := os.Getenv("CUDA_VISIBLE_DEVICES")
	if visible == "" {
		visible = os.Getenv("NVIDIA_VISIBLE_DEVICES")
	}
	level := slog.LevelInfo
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if s.log.Enabled(context.Background(), l) {
			level = l
			break
		}
	}
	s.watch.send(watchMsg{Config: &watchConfig{StateDir: s.dir.path, NVMLLibrary: s.cfg.NVMLLibrary, Visible: visible,
		KillTimeout: s.cfg.KillTimeout, ConfirmTimeout: s.cfg.ConfirmTimeout, LogLevel: level}})
	s.log.Debug("watcher started", "pid", pid)
}

func (w *watcher) send(m watchMsg) {
	if w != nil {
		_ = w.enc.Encode(m) // a watcher that died is a watcher that will not act
	}
}

// done tells the watcher the supervisor stopped the kernel itself.
func (w *watcher) done() {
	if w != nil {
		w.send(watchMsg{Done: true})
		w.w.Close()
	}
}

// Watch is the watcher's main: it reads the supervisor's messages from in
// until the pipe ends, then, unless the supervisor said "done", finishes
// the kernel. It returns the process exit code.
func Watch(in io.Reader, stderr io.Writer) int {
	var cfg watchConfig
	var rec *State
	var baseline []gpu.Holder
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
		}
		done = done || m.Done
	}
	if done || rec == nil || cfg.StateDir == "" {
		return 0
	}
	lg := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel})).With(
		"prog", "tfgpu-kernel", "kernel", shortID(rec.KernelID), "watcher", os.Getpid())
	finishForDeadSupervisor(lg, cfg, *rec, baseline)
	return 0
}

// finishForDeadSupervisor is what the watcher does once its supervisor is
// gone.
func finishForDeadSupervisor(lg *slog.Logger, cfg watchConfig, st State, baseline []gpu.Holder) {
	start := time.Now()
	st.Owner = os.Geteuid()
	// The pipe ends when the dying supervisor's files are closed, a moment
	// before the kernel marks it a zombie; finish (rightly) spares the tree
	// of a supervisor that still looks alive, so wait for that moment.
	for st.SupervisorAlive() && time.Since(start) < time.Second {
		time.Sleep(time.Millisecond)
	}
	n, gerr := gpu.Open(cfg.NVMLLibrary, cfg.Visible)
	var old *gpu.Old
	if gerr == nil {
		defer n.Close()
		if hs, err := n.Holders(); err == nil {
			pids := TreePids(st)
			if st.KernelPID > 0 {
				pids = append(pids, st.KernelPID) // killed by its parent-death signal; its context may linger
			}
			old = gpu.Watch(hs, pids, baseline)
		}
	}
	d, err := openStateDir(cfg.StateDir, false, false)
	if err != nil {
		lg.Error("the supervisor died and its kernel cannot be finished", "err", err)
		return
	}
	defer d.Close()
	killed, err := d.finish(st, cfg.KillTimeout)
	took := time.Since(start)
	attrs := []any{"dead_supervisor", st.SupervisorPID, "processes_killed", killed, "killed_in", took.Round(time.Millisecond)}
	if err != nil {
		lg.Error("the supervisor died; its kernel was not finished", append(attrs, "err", err)...)
		return
	}
	lg.Warn("the supervisor died (SIGKILL?); finished its kernel", attrs...)
	if old == nil {
		if gerr != nil {
			lg.Debug("GPU release not checked", "why", gerr)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConfirmTimeout)
	defer cancel()
	res, err := gpu.Confirm(ctx, n, *old, confirmPoll)
	gattrs := []any{"event", "supervisor died", "released", res.ReleasedText(), "took", res.Took.Round(time.Millisecond),
		"by", res.By, "nvml_polls", res.Polls}
	switch {
	case err != nil:
		lg.Warn("GPU release could not be confirmed", append(gattrs, "err", err)...)
	case len(res.Held) > 0:
		lg.Warn("GPU memory still held after the dead supervisor's tree was killed", append(gattrs, "held", res.HeldText())...)
	default:
		lg.Info("GPU memory released", gattrs...)
	}
}

// treeMarkerEnv names the environment variable every process of a kernel's
// tree inherits in "proc" mode: without a cgroup, it is how the tree's
// processes are found once the supervisor (their subreaper) is gone and
// they have been reparented away.
const treeMarkerEnv = "TFGPU_TREE"

// markedPids lists the live processes of owner whose environment carries
// marker.
func markedPids(marker string, owner int) []int {
	want := []byte(treeMarkerEnv + "=" + marker + "\x00")
	pids := []int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return pids
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == os.Getpid() || procOwner(pid) != owner {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !(bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...))) {
			continue
		}
		if st, ok := procState(pid); ok && st != 'Z' && st != 'X' {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killMarked SIGSTOPs and then SIGKILLs every process of owner whose
// environment carries marker, until none is left or ctx ends; it returns
// how many it killed. A process that cleared its environment is not found:
// proc mode is the fallback for hosts without a usable cgroup.
func killMarked(ctx context.Context, marker string, owner int) (int, error) {
	killed := map[int]bool{}
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		found := markedPids(marker, owner)
		if len(found) == 0 {
			return len(killed), nil
		}
		for _, p := range found {
			_ = unix.Kill(p, unix.SIGSTOP) // none forks again after the scan that missed its child
		}
		for _, p := range found {
			if err := unix.Kill(p, unix.SIGKILL); err == nil {
				killed[p] = true
			}
		}
		select {
		case <-ctx.Done():
			return len(killed), fmt.Errorf("processes of tree %s still alive: %w", marker, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// procState is pid's state letter from /proc/PID/stat.
func procState(pid int) (byte, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}

// validMarker is the shape of the markers newMarker makes.
func validMarker(m string) bool {
	id, rest, ok := strings.Cut(m, "/")
	return ok && validKernelID(id) && len(rest) == 16 && strings.Trim(rest, "0123456789abcdef") == ""
}

// newMarker makes a tree marker for kernel id: unique to this supervisor.
func newMarker(id string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return id + "/" + hex.EncodeToString(b[:])
}
