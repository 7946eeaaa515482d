package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/wrapper/gpu"
)

// State is what a supervisor records about its kernel in the state
// directory, one file per kernel id, so that `tfgpu-kernel stop` (and the
// next supervisor) can find and finish a kernel whose supervisor is hung or
// gone. It never holds the session key.
type State struct {
	KernelID        string    `json:"kernel_id"`
	SupervisorPID   int       `json:"supervisor_pid"`
	SupervisorStart uint64    `json:"supervisor_start"` // /proc starttime: tells a reused pid
	KernelPID       int       `json:"kernel_pid"`
	KernelStart     uint64    `json:"kernel_start"`     // /proc starttime of the kernel
	Containment     string    `json:"containment"`      // cgroup.Tree.Mode()
	Cgroup          string    `json:"cgroup,omitempty"` // the kernel's cgroup directory (v2)
	ConnectionFile  string    `json:"connection_file"`
	InnerDir        string    `json:"inner_dir,omitempty"` // the 0700 directory of the inner connection file and sockets
	Session         string    `json:"session,omitempty"`   // JPY_SESSION_NAME: the notebook
	Started         time.Time `json:"started"`
	Phase           string    `json:"phase"` // PhaseStarting, PhaseRunning or PhaseStopping
}

// Phases of a kernel, as its supervisor records them (ps shows them as
// the state while the supervisor runs).
const (
	PhaseStarting = "starting" // spawned; the kernel has not said anything yet
	PhaseRunning  = "running"  // the kernel answers
	PhaseStopping = "stopping" // shutdown, restart or death: the tree is being killed
)

// StateDir is where state files live: $TFGPU_STATE_DIR, else
// /run/tfgpu-kernel for root, else $XDG_RUNTIME_DIR/tfgpu-kernel, else
// tfgpu-kernel-UID in the temporary directory.
func StateDir() string {
	if d := os.Getenv("TFGPU_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/tfgpu-kernel"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "tfgpu-kernel")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("tfgpu-kernel-%d", os.Geteuid()))
}

func statePath(dir, id string) string { return filepath.Join(dir, id+".json") }

// writeState writes st atomically, 0600 in a 0700 directory.
func writeState(dir string, st State) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp.Name(), statePath(dir, st.KernelID)); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// ReadStates returns every state file in dir; files that cannot be read or
// parsed are skipped (a supervisor may be writing one).
func ReadStates(dir string) ([]State, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read states: %w", err)
	}
	var out []State
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		var st State
		if json.Unmarshal(b, &st) == nil && st.KernelID != "" {
			out = append(out, st)
		}
	}
	return out, nil
}

// SupervisorAlive reports whether the supervisor that wrote st still runs
// (its pid exists with the same start time).
func (st State) SupervisorAlive() bool {
	if st.SupervisorPID <= 1 {
		return false
	}
	start, err := cgroup.StartTime(st.SupervisorPID)
	return err == nil && start == st.SupervisorStart
}

// SupervisorStopped reports whether the supervisor is stopped (SIGSTOP,
// a debugger): alive but unable to act.
func (st State) SupervisorStopped() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", st.SupervisorPID))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't')
}

// removeState removes the state file of id if it still names this process.
func removeState(dir, id string) {
	b, err := os.ReadFile(statePath(dir, id))
	if err != nil {
		return
	}
	var st State
	if json.Unmarshal(b, &st) == nil && st.SupervisorPID == os.Getpid() {
		_ = os.Remove(statePath(dir, id))
	}
}

// Finish kills the tree of the kernel st describes, waits until it is
// empty and removes its cgroup and state file: what `tfgpu-kernel stop`
// does, and what a supervisor does at start for kernels whose supervisor
// died. It returns how many processes were killed.
func Finish(dir string, st State, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	killed := 0
	var err error
	switch {
	case st.Cgroup != "" && (st.Containment == cgroup.ModeV2 || st.Containment == CgroupSystemd):
		killed, err = cgroup.DestroyV2(ctx, st.Cgroup)
	case st.Cgroup != "" && st.Containment == cgroup.ModeV1:
		killed, err = destroyV1(ctx, st.Cgroup)
	case st.KernelPID > 1:
		// proc mode: without a cgroup only the kernel's process group can
		// be found once its supervisor (the subreaper) is gone, and only
		// while the kernel, its leader, lives: a pid reused since could
		// lead another group.
		if start, e := cgroup.StartTime(st.KernelPID); e != nil || start != st.KernelStart {
			break
		}
		if e := unix.Kill(-st.KernelPID, unix.SIGKILL); e == nil {
			killed = 1
		} else if !errors.Is(e, unix.ESRCH) {
			err = fmt.Errorf("kill process group %d: %w", st.KernelPID, e)
		}
	}
	if err == nil {
		// The dead supervisor's inner directory (its sockets): only a
		// directory of the name writeInner gives is removed.
		if st.InnerDir != "" && strings.HasPrefix(filepath.Base(st.InnerDir), "tfgpu-") {
			_ = os.RemoveAll(st.InnerDir)
		}
		_ = os.Remove(statePath(dir, st.KernelID))
	}
	return killed, err
}

// destroyV1 kills and removes a freezer cgroup another supervisor made: a
// V1Tree of the same name treats it as a leftover and empties it.
func destroyV1(ctx context.Context, dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	// The supervisor also made a pids cgroup of the same name, under its own
	// pids cgroup; the tree removes both.
	pids := ""
	if l, err := cgroup.DetectLayout(); err == nil {
		pids, _ = cgroup.V1SelfDir(l, "pids")
	}
	t, err := cgroup.NewV1Tree(ctx, filepath.Dir(dir), pids, strings.TrimPrefix(filepath.Base(dir), "tfgpu-"))
	if err != nil {
		return 0, err
	}
	return len(strings.Fields(string(b))), t.Close()
}

// reapDead finishes kernels whose supervisor died (SIGKILL, OOM, a crash)
// before this one starts: their processes may hold memory, GPU contexts
// included (DESIGN §3 Start 3).
func (s *supervisor) reapDead() {
	states, err := ReadStates(s.cfg.StateDir)
	if err != nil {
		s.log.Warn("cannot read kernel states", "dir", s.cfg.StateDir, "err", err)
	}
	for _, st := range states {
		if st.SupervisorAlive() {
			continue
		}
		var old *gpu.Old
		if hs, ok := s.holders(); ok {
			old = gpu.Watch(hs, TreePids(st), nil)
		}
		n, err := Finish(s.cfg.StateDir, st, s.cfg.KillTimeout)
		attrs := []any{"dead_kernel", st.KernelID, "dead_supervisor", st.SupervisorPID, "processes", n}
		if err != nil {
			s.log.Error("cannot finish a kernel whose supervisor died", append(attrs, "err", err)...)
			continue
		}
		msg := "finished a kernel whose supervisor died"
		if st.KernelID == s.id {
			msg = "killed processes left by a previous supervisor of this kernel"
		}
		s.log.Warn(msg, attrs...)
		if w := s.confirm("previous supervisor died", old); w != "" && st.KernelID == s.id {
			s.pendingWarning = w
		}
	}
}

// setPhase records the kernel's phase in its state file.
func (s *supervisor) setPhase(phase string) {
	if s.st.KernelID == "" || s.st.Phase == phase {
		return
	}
	s.st.Phase = phase
	if err := writeState(s.cfg.StateDir, s.st); err != nil {
		s.log.Debug("cannot record the kernel's phase", "phase", phase, "err", err)
	}
}

// record writes the state file once the kernel runs.
func (s *supervisor) record() {
	start, _ := cgroup.StartTime(os.Getpid())
	kstart, _ := cgroup.StartTime(s.kpid)
	st := State{KernelID: s.id, SupervisorPID: os.Getpid(), SupervisorStart: start, KernelPID: s.kpid, KernelStart: kstart,
		Containment: s.tree.Mode(), ConnectionFile: s.cfg.ConnFile, InnerDir: s.innerDir,
		Session: os.Getenv("JPY_SESSION_NAME"), Started: time.Now().UTC(), Phase: PhaseStarting}
	if d, ok := s.tree.(interface{ Dir() string }); ok {
		st.Cgroup = d.Dir()
	}
	if err := writeState(s.cfg.StateDir, st); err != nil {
		s.log.Warn("cannot record the kernel's state; 'tfgpu-kernel stop' will not find it", "err", err)
		return
	}
	s.st = st
}
