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
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
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
	Phase           string    `json:"phase"`                   // PhaseStarting, PhaseRunning or PhaseStopping
	BootID          string    `json:"boot_id,omitempty"`       // a record of another boot names nothing alive
	MemoryCgroup    string    `json:"memory_cgroup,omitempty"` // a v1 memory cgroup of its own, when the limit made one
	Marker          string    `json:"tree_marker,omitempty"`   // TFGPU_TREE in the tree's environment (proc mode finds it by that)

	// Owner is the uid that owns the record (its state directory's owner):
	// what the record names is acted on only when that uid owns it too.
	Owner int `json:"-"`
	// Dir is the state directory it was read from.
	Dir string `json:"-"`
}

// Phases of a kernel, as its supervisor records them (ps shows them as
// the state while the supervisor runs).
const (
	PhaseStarting = "starting" // spawned; the kernel has not said anything yet
	PhaseRunning  = "running"  // the kernel answers
	PhaseStopping = "stopping" // shutdown, restart or death: the tree is being killed
)

// StateDir is where state files live: $TFGPU_STATE_DIR; else
// /run/tfgpu-kernel for root; else $XDG_RUNTIME_DIR/tfgpu-kernel when
// XDG_RUNTIME_DIR is the user's own private directory (systemd-logind
// makes /run/user/UID); else tfgpu-kernel/HOSTNAME in the user's state
// directory ($XDG_STATE_HOME, ~/.local/state), where only the user can
// create it (a shared /tmp path can be made first by anyone), per host
// because homes are shared over NFS. "" when there is no home either.
func StateDir() string {
	if d := os.Getenv("TFGPU_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/tfgpu-kernel"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && ownPrivateDir(d) {
		return filepath.Join(d, "tfgpu-kernel")
	}
	base := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(base) {
		home, err := os.UserHomeDir()
		if err != nil || !filepath.IsAbs(home) {
			return ""
		}
		base = filepath.Join(home, ".local", "state")
	}
	host, err := os.Hostname()
	if err != nil || !validName(host) {
		host = "localhost"
	}
	return filepath.Join(base, "tfgpu-kernel", host)
}

// ownPrivateDir reports whether dir is a directory (not a link) of the
// effective user's with no permission for others.
func ownPrivateDir(dir string) bool {
	var s unix.Stat_t
	return filepath.IsAbs(dir) && unix.Lstat(dir, &s) == nil && s.Mode&unix.S_IFMT == unix.S_IFDIR &&
		int(s.Uid) == os.Geteuid() && s.Mode&0o077 == 0
}

func stateName(id string) string { return id + ".json" }

// writeState writes st atomically into d.
func writeState(d *stateDir, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return d.write(stateName(st.KernelID), append(b, '\n'))
}

// ReadStates returns the records in dir that check out: files owned by the
// directory's owner, named after the kernel id they hold, with an id of
// the shape supervisors write. Each file that does not is left alone and
// said in refused (each wrapping ErrRefused); a supervisor may also be
// writing one. For root, dir may be any user's; the records' Owner says
// whose.
func ReadStates(dir string) (states []State, refused []error, err error) {
	d, err := openStateDir(dir, false, true)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	return d.states()
}

func (d *stateDir) states() ([]State, []error, error) {
	names, err := d.names(".json")
	if err != nil {
		return nil, nil, fmt.Errorf("read states: %w", err)
	}
	var out []State
	var refusals []error
	for _, name := range names {
		path := filepath.Join(d.path, name)
		b, err := d.read(name)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				refusals = append(refusals, refusedFile(path, err))
			}
			continue
		}
		var st State
		switch {
		case json.Unmarshal(b, &st) != nil:
			continue // being written, or not a record
		case !validKernelID(st.KernelID):
			refusals = append(refusals, refused("%s: kernel id %q is not of the shape supervisors write", path, Printable(st.KernelID)))
			continue
		case stateName(st.KernelID) != name:
			refusals = append(refusals, refused("%s: holds kernel %s, not the kernel its name says", path, st.KernelID))
			continue
		}
		st.Owner, st.Dir = d.uid, d.path
		out = append(out, st)
	}
	return out, refusals, nil
}

// refusedFile wraps the error of a state file read() did not accept.
func refusedFile(path string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrRefused, path, err)
}

// SupervisorAlive reports whether the supervisor that wrote st still runs
// (its pid exists with the same start time and owner, since this boot).
func (st State) SupervisorAlive() bool { return st.owns(st.SupervisorPID, st.SupervisorStart) }

// SupervisorStopped reports whether the supervisor is stopped (SIGSTOP,
// a debugger): alive but unable to act.
func (st State) SupervisorStopped() bool {
	state, ok := procState(st.SupervisorPID)
	return ok && (state == 'T' || state == 't')
}

// removeState removes the state file of id if it still names this process.
func removeState(d *stateDir, id string) {
	b, err := d.read(stateName(id))
	if err != nil {
		return
	}
	var st State
	if json.Unmarshal(b, &st) == nil && st.SupervisorPID == os.Getpid() {
		_ = d.remove(stateName(id))
	}
}

// Finish kills the tree of the kernel st describes, waits until it is
// empty and removes its cgroups, inner directory and state file: what
// `tfgpu-kernel stop` does, and what a supervisor does at start for
// kernels whose supervisor died. Every field is checked first (see
// record.go); a field that does not check out is not acted on, and the
// error (wrapping ErrRefused) says which. It returns how many processes
// were killed.
func Finish(dir string, st State, timeout time.Duration) (int, error) {
	d, err := openStateDir(dir, false, true)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	return d.finish(st, timeout)
}

func (d *stateDir) finish(st State, timeout time.Duration) (int, error) {
	if !validKernelID(st.KernelID) {
		return 0, refused("kernel id %q", Printable(st.KernelID))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	killed := 0
	var errs []error
	if st.thisBoot() {
		cg, err := st.checkedCgroup()
		errs = append(errs, err)
		switch {
		case err != nil:
		case cg != "" && (st.Containment == cgroup.ModeV2 || st.Containment == CgroupSystemd):
			killed, err = cgroup.DestroyV2(ctx, cg)
			errs = append(errs, err)
		case cg != "" && st.Containment == cgroup.ModeV1:
			killed, err = destroyV1(ctx, cg)
			errs = append(errs, err)
		case cg == "" && st.Cgroup == "" && st.KernelPID > 1 && !st.owns(st.KernelPID, st.KernelStart) &&
			st.started(st.KernelPID, st.KernelStart):
			errs = append(errs, refused("kernel pid %d belongs to uid %d, not to the record's owner %d",
				st.KernelPID, procOwner(st.KernelPID), st.Owner))
		case cg == "" && st.Cgroup == "" && st.owns(st.KernelPID, st.KernelStart):
			// proc mode: without a cgroup only the kernel's process group
			// can be found once its supervisor (the subreaper) is gone, and
			// only while the kernel, its leader, lives: a pid reused since
			// could lead another group.
			if e := unix.Kill(-st.KernelPID, unix.SIGKILL); e == nil {
				killed = 1
			} else if !errors.Is(e, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("kill process group %d: %w", st.KernelPID, e))
			}
		}
		if st.Cgroup == "" && validMarker(st.Marker) && !st.SupervisorAlive() {
			// Also what left the group (setsid) and was reparented away
			// when the supervisor, their subreaper, died.
			n, err := killMarked(ctx, st.Marker, st.Owner)
			killed = max(killed, n)
			errs = append(errs, err)
		}
		if st.MemoryCgroup != "" {
			mem := st
			mem.Cgroup = st.MemoryCgroup
			if mc, err := mem.checkedCgroup(); err != nil {
				errs = append(errs, err)
			} else if mc != "" {
				_ = os.Remove(mc) // empty once the tree is dead
			}
		}
	}
	// The dead supervisor's inner directory (its sockets).
	if in, err := st.checkedInnerDir(); err != nil {
		errs = append(errs, err)
	} else if in != "" {
		_ = os.RemoveAll(in)
	}
	err := errors.Join(errs...)
	if err == nil || errors.Is(err, ErrRefused) {
		// A record that is a lie is not kept either; one that the next
		// supervisor of this kernel has written since is left alone.
		if b, rerr := d.read(stateName(st.KernelID)); rerr == nil {
			var now State
			if json.Unmarshal(b, &now) == nil && now.SupervisorPID == st.SupervisorPID && now.SupervisorStart == st.SupervisorStart {
				_ = d.remove(stateName(st.KernelID))
			}
		}
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
	states, refusals, err := s.dir.states()
	if err != nil {
		s.log.Warn("cannot read kernel states", "dir", s.dir.path, "err", err)
	}
	for _, r := range refusals {
		s.log.Warn("refused a kernel record", "why", r)
	}
	for _, st := range states {
		if st.SupervisorAlive() {
			continue
		}
		var old *gpu.Old
		if hs, ok := s.holders(); ok {
			old = gpu.Watch(hs, TreePids(st), nil)
		}
		n, err := s.dir.finish(st, s.cfg.KillTimeout)
		attrs := []any{"dead_kernel", st.KernelID, "dead_supervisor", st.SupervisorPID, "processes", n}
		if errors.Is(err, ErrRefused) {
			s.log.Warn("refused to act on a kernel record", append(attrs, "file", filepath.Join(s.dir.path, stateName(st.KernelID)), "why", err)...)
			continue
		}
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
	if err := writeState(s.dir, s.st); err != nil {
		s.log.Debug("cannot record the kernel's phase", "phase", phase, "err", err)
	}
}

// describe is what the supervisor records about its kernel now. It fails
// only when the supervisor cannot read its own start time: a record with
// a wrong one would make the next supervisor take this one for dead.
func (s *supervisor) describe() (State, error) {
	start, err := cgroup.StartTime(os.Getpid())
	if err != nil {
		return State{}, fmt.Errorf("read the supervisor's start time: %w", err)
	}
	st := State{KernelID: s.id, SupervisorPID: os.Getpid(), SupervisorStart: start,
		Containment: s.tree.Mode(), ConnectionFile: s.cfg.ConnFile, InnerDir: s.innerDir,
		Session: os.Getenv("JPY_SESSION_NAME"), Started: time.Now().UTC(), Phase: PhaseStarting,
		BootID: bootID, Owner: os.Geteuid(), Marker: s.marker, MemoryCgroup: s.memoryCgroup()}
	if s.kpid > 0 {
		if kstart, err := cgroup.StartTime(s.kpid); err == nil { // else dead already: nothing to name
			st.KernelPID, st.KernelStart = s.kpid, kstart
		}
	}
	if d, ok := s.tree.(interface{ Dir() string }); ok {
		st.Cgroup = d.Dir()
	}
	return st, nil
}

// memoryCgroup is the memory limit's cgroup when it is one of its own (v1),
// not the tree's.
func (s *supervisor) memoryCgroup() string {
	if s.mem == nil {
		return ""
	}
	if d, ok := s.tree.(interface{ Dir() string }); ok && d.Dir() == s.mem.Where() {
		return ""
	}
	return s.mem.Where()
}

// record writes the state file once the kernel runs, and tells the
// watcher.
func (s *supervisor) record() {
	st, err := s.describe()
	if err != nil {
		s.log.Warn("cannot record the kernel's state; 'tfgpu-kernel stop' will not find it", "err", err)
		return
	}
	s.watch.send(watchMsg{Record: &st})
	if err := writeState(s.dir, st); err != nil {
		s.log.Warn("cannot record the kernel's state; 'tfgpu-kernel stop' will not find it", "err", err)
		return
	}
	s.st = st
}
