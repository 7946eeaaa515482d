package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
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
	Phase           string    `json:"phase"`                   // PhaseStarting, PhaseRunning, PhaseStopping or PhaseParked
	BootID          string    `json:"boot_id,omitempty"`       // a record of another boot names nothing alive
	MemoryCgroup    string    `json:"memory_cgroup,omitempty"` // a v1 memory cgroup of its own, when the limit made one
	Marker          string    `json:"tree_marker,omitempty"`   // TFGPU_TREE in the tree's environment (proc mode finds it by that)
	// Tree is what a proc-mode supervisor last saw of its tree (each pid
	// with its start time), for its watcher: a process that hides its
	// environment (non-dumpable) and left the process group is found by
	// this, or as a descendant of one of these, once the supervisor (the
	// subreaper) is gone. Claims like the rest: only the owner's processes
	// with those start times are acted on.
	Tree []proc.Ref `json:"tree,omitempty"`
	// Parks says the supervisor parks its kernel on an Order (SIGUSR1);
	// stop ends older ones with SIGTERM.
	Parks bool `json:"parks,omitempty"`
	// Parked is set while the supervisor keeps a stopped kernel's place
	// (Phase is PhaseParked).
	Parked *Parked `json:"parked,omitempty"`
	// Slurm names the Slurm job the supervisor ran in: once the job's
	// cgroups are gone, ps says the kernel ended with its job.
	Slurm *SlurmJob `json:"slurm,omitempty"`
	// Stub is the process Jupyter launched, once a standby took over its
	// start (it forwards signals and exits with the supervisor's code);
	// Watcher is the supervisor's watcher. Both are named for Census.
	Stub    *proc.Ref `json:"stub,omitempty"`
	Watcher *proc.Ref `json:"watcher,omitempty"`
	// Placement is what --gpus auto gave the kernel that runs now.
	Placement *Placement `json:"placement,omitempty"`

	// Owner is the uid that owns the record (its state directory's owner):
	// what the record names is acted on only when that uid owns it too.
	Owner int `json:"-"`
	// Dir is the state directory it was read from.
	Dir string `json:"-"`
	// Activity is what the supervisor publishes of its kernel's execution
	// state (activity.go); nil when it publishes nothing valid.
	Activity *Activity `json:"-"`
}

// Phases of a kernel, as its supervisor records them (ps shows them as
// the state while the supervisor runs). They are the supervisor's
// lifecycle states (docs/design.md#lifecycle); a stopped kernel has no
// record.
const (
	PhaseStarting = "starting" // spawned; the kernel has not said anything yet
	PhaseRunning  = "running"  // the kernel answers
	PhaseStopping = "stopping" // shutdown, restart or death: the tree is being killed
)

// DefaultDir is where state files live: $TFGPU_STATE_DIR; else
// /run/tfgpu-kernel for root; else $XDG_RUNTIME_DIR/tfgpu-kernel when
// XDG_RUNTIME_DIR is the user's own private directory (systemd-logind
// makes /run/user/UID); else tfgpu-kernel/HOSTNAME in the user's state
// directory ($XDG_STATE_HOME, ~/.local/state), where only the user can
// create it (a shared /tmp path can be made first by anyone), per host
// because homes are shared over NFS. "" when there is no home either.
func DefaultDir() string {
	return defaultDir(os.Geteuid(), os.Getenv, accountHome)
}

// accountHome is the effective user's home directory in the user
// database, "" when there is none. A kernel may be started without HOME:
// Jupyter Enterprise Gateway hands the kernels it launches only KERNEL_*,
// the kernelspec's env and what its inherited_envs names (issue 36); the
// user's home is the same directory then, as a login shell's HOME says.
func accountHome() string {
	u, err := user.Current()
	if err != nil {
		return ""
	}
	return u.HomeDir
}

// defaultDir is DefaultDir for the effective user euid, with the
// environment getenv and the user database's home (read only when HOME
// is unset).
func defaultDir(euid int, getenv func(string) string, home func() string) string {
	if d := getenv("TFGPU_STATE_DIR"); d != "" {
		return d
	}
	if euid == 0 {
		return "/run/tfgpu-kernel"
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" && ownPrivateDir(d) {
		return filepath.Join(d, "tfgpu-kernel")
	}
	base := getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(base) {
		h := getenv("HOME")
		if h == "" {
			h = home()
		}
		if !filepath.IsAbs(h) {
			return ""
		}
		base = filepath.Join(h, ".local", "state")
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

// File is the path of the record's file (Dir is set by States).
func (st State) File() string { return filepath.Join(st.Dir, stateName(st.KernelID)) }

// Write records st in d, atomically.
func (d *Dir) Write(st State) error {
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
	d, err := OpenDir(dir, false, true)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	return d.States()
}

// States is ReadStates of the open directory d.
func (d *Dir) States() ([]State, []error, error) {
	names, err := d.names(".json")
	if err != nil {
		return nil, nil, fmt.Errorf("read states: %w", err)
	}
	out, refusals := d.statesNamed(names, nil)
	return out, refusals, nil
}

// statesNamed reads the records of d named names, checked as States says,
// each taken from the owner's share s as it is read (nil: none to keep);
// once the share is spent the rest are not read.
func (d *Dir) statesNamed(names []string, s *spend) ([]State, []error) {
	var out []State
	var refusals []error
	for _, name := range names {
		path := filepath.Join(d.path, name)
		if !ValidKernelID(strings.TrimSuffix(name, ".json")) {
			refusals = append(refusals, refused("%s: not named after a kernel id of the shape supervisors write", path))
			continue
		}
		b, err := d.read(name)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				refusals = append(refusals, refusedFile(path, err))
			}
			continue
		}
		if s != nil && !s.record(len(b)) {
			break
		}
		var st State
		switch {
		case json.Unmarshal(b, &st) != nil:
			continue // being written, or not a record
		case !ValidKernelID(st.KernelID):
			refusals = append(refusals, refused("%s: kernel id %q is not of the shape supervisors write", path, Printable(st.KernelID)))
			continue
		case stateName(st.KernelID) != name:
			refusals = append(refusals, refused("%s: holds kernel %s, not the kernel its name says", path, st.KernelID))
			continue
		}
		if err := st.bound(); err != nil {
			refusals = append(refusals, refused("%s: %v", path, err))
			continue
		}
		st.Owner, st.Dir = d.uid, d.path
		if a, err := d.readActivity(st); err == nil {
			st.Activity = &a
		}
		out = append(out, st)
	}
	return out, refusals
}

// refusedFile wraps the error of a state file read() did not accept.
func refusedFile(path string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrRefused, path, err)
}

// SupervisorAlive reports whether the supervisor that wrote st still runs
// (its pid exists with the same start time and owner, since this boot).
// A record without the start time (supervisors write none without it; a
// hand-made or damaged one may lack it) names its supervisor while that
// pid is a live process of the record's owner: a supervisor wrongly taken
// for dead would have its running kernel finished by the next start.
func (st State) SupervisorAlive() bool {
	start := st.SupervisorStart
	if start == 0 {
		p, err := proc.Read(st.SupervisorPID)
		if err != nil {
			return false
		}
		start = p.Start // whatever runs there now, if it is the owner's
	}
	return st.owns(st.SupervisorPID, start)
}

// SupervisorStopped reports whether the supervisor is stopped (SIGSTOP,
// a debugger): alive but unable to act.
func (st State) SupervisorStopped() bool {
	p, err := proc.Read(st.SupervisorPID)
	return err == nil && p.Stopped()
}

// Remove removes the record of kernel id and its activity file if they
// still name this process (the next supervisor of the kernel may have
// written its own since).
func (d *Dir) Remove(id string) {
	d.removeActivity(id, os.Getpid())
	b, err := d.read(stateName(id))
	if err != nil {
		return
	}
	var st State
	if json.Unmarshal(b, &st) == nil && st.SupervisorPID == os.Getpid() {
		_ = d.remove(stateName(id))
	}
}

// SlurmJob is the Slurm job a supervisor ran in (internal/engine).
type SlurmJob struct {
	Job  string `json:"job"`
	Step string `json:"step,omitempty"`
	// Cgroups are the job's cgroup directories (one per hierarchy), where
	// Slurm made them (proctrack/cgroup, task/cgroup); none for
	// proctrack/linuxproc without task/cgroup.
	Cgroups []string `json:"cgroups,omitempty"`
}

// Ended reports whether the job is verifiably over: it had cgroups, and
// none of them exists any more (Slurm removes them when the job ends). A
// record is the user's word: only clean paths under /sys/fs/cgroup named
// job_<the job> are looked at (no path a user chose is walked by root).
func (j *SlurmJob) Ended() bool {
	if j == nil || len(j.Cgroups) == 0 {
		return false
	}
	for _, d := range j.Cgroups {
		if filepath.Clean(d) != d || !strings.HasPrefix(d, "/sys/fs/cgroup/") || filepath.Base(d) != "job_"+j.Job {
			return false
		}
		if _, err := os.Lstat(d); err == nil {
			return false
		}
	}
	return true
}
