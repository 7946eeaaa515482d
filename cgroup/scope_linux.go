package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// scopeReportTimeout bounds the wait for systemd-run to set up the scope
// (a D-Bus round trip to the user manager, normally tens of ms).
const scopeReportTimeout = 10 * time.Second

// scopeShim runs inside the new scope, between systemd-run and the kernel:
// it reports the cgroup it is in on fd 3, closes it, and execs the kernel,
// so the supervisor knows the scope before any kernel code runs, and learns
// that systemd-run failed when fd 3 closes without a report.
const scopeShim = `cat /proc/self/cgroup >&3 && exec 3>&- && exec "$@"`

// systemdScope says whether a systemd user manager can give the kernel a
// delegated scope: systemd-run on PATH and the manager's private socket in
// $XDG_RUNTIME_DIR, with a cgroup2 tree to find the scope in.
func systemdScope() (run string, l Layout, err error) {
	l, err = DetectLayout()
	if err != nil {
		return "", l, fmt.Errorf("detect cgroups: %w", err)
	}
	if l.V2Mount == "" {
		return "", l, fmt.Errorf("no cgroup2 tree (layout %s)", l.Kind)
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		return "", l, errors.New("no systemd user session: XDG_RUNTIME_DIR is not set")
	}
	if fi, err := os.Stat(filepath.Join(rt, "systemd", "private")); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return "", l, fmt.Errorf("no systemd user manager: no socket %s", filepath.Join(rt, "systemd", "private"))
	}
	run, err = exec.LookPath("systemd-run")
	if err != nil {
		return "", l, fmt.Errorf("no systemd-run: %w", err)
	}
	return run, l, nil
}

// scopeTree is the "systemd" mode: the kernel runs in a transient scope of
// the user's systemd manager, made by `systemd-run --user --scope -p
// Delegate=yes`, for a supervisor whose own cgroup it may not write (a
// desktop session's session-N.scope belongs to root). systemd-run creates
// the scope around its own process and execs the kernel in it, so the scope
// is exactly the kernel's tree, owned by the user: from then on it is a v2
// tree (cgroup.kill, populated 0). Until the shim has reported the scope,
// and if systemd-run fails, the tree is the proc tree of its process.
type scopeTree struct {
	run, unit string
	mount     string // the cgroup2 mount the report's path is under
	memLimit  int64  // MemoryMax of the scope
	proc      Tree

	mu      sync.Mutex
	report  *os.File // read end of the shim's fd 3
	w       *os.File // write end, the kernel's fd 3
	v2      *V2Tree
	err     error // why the scope could not be adopted
	escaped []int // Pids' processes outside the scope, at its last call
}

var _ Launcher = (*scopeTree)(nil)

func newScopeTree(run string, l Layout, name string, r *proc.Reaper, memLimit int64) *scopeTree {
	return &scopeTree{run: run, mount: l.V2Mount, proc: supervisorProcTree(r), unit: ScopeUnit(name), memLimit: memLimit}
}

// ScopeUnit is the name of the systemd scope of the tree named name:
// tfgpu-NAME.scope, with what unit names do not allow replaced by '_'.
func ScopeUnit(name string) string {
	return "tfgpu-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' || r == ':' {
			return r
		}
		return '_'
	}, name) + ".scope"
}

func (t *scopeTree) Mode() string { return ModeSystemd }

func (t *scopeTree) Configure(attr *syscall.SysProcAttr) error { return t.proc.Configure(attr) }

// Launch turns the kernel's command into systemd-run's, and adds the
// shim's report pipe as fd 3 of files.
func (t *scopeTree) Launch(path string, argv []string, files []uintptr) (string, []string, []uintptr, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", nil, nil, err
	}
	t.mu.Lock()
	t.report, t.w = r, w
	t.mu.Unlock()
	run := []string{"systemd-run", "--user", "--scope", "--quiet", "--collect",
		"--unit=" + t.unit, "--description=tfgpu-kernel " + strings.TrimSuffix(t.unit, ".scope"),
		"-p", "Delegate=yes"}
	if t.memLimit > 0 {
		run = append(run, "-p", "MemoryMax="+strconv.FormatInt(t.memLimit, 10), "-p", "MemorySwapMax=0")
	}
	run = append(run, "--", "/bin/sh", "-c", scopeShim, "tfgpu-scope", path)
	run = append(run, argv[1:]...)
	return t.run, run, append(files[:3:3], w.Fd()), nil
}

// Started waits for the shim's report and adopts the scope's cgroup. When
// there is none (systemd-run failed: it says why on stderr), Err says so and
// the tree stays the proc tree of what was started.
func (t *scopeTree) Started(pid int) {
	t.proc.Started(pid)
	t.mu.Lock()
	r, w := t.report, t.w
	t.report, t.w = nil, nil
	t.mu.Unlock()
	if r == nil {
		t.fail(errors.New("no systemd-run started"))
		return
	}
	w.Close()
	defer r.Close()
	r.SetReadDeadline(time.Now().Add(scopeReportTimeout))
	var rel string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			rel = p
		}
	}
	if err := sc.Err(); err != nil {
		t.fail(fmt.Errorf("no report from the scope: %w", err))
		return
	}
	if rel == "" {
		t.fail(errors.New("systemd-run did not start the kernel in a scope (see its message above)"))
		return
	}
	v2, err := AdoptV2(filepath.Join(t.mount, rel))
	if err != nil {
		t.fail(err)
		return
	}
	v2.Started(pid)
	t.mu.Lock()
	t.v2 = v2
	t.mu.Unlock()
}

func (t *scopeTree) fail(err error) {
	t.mu.Lock()
	t.err = err
	t.mu.Unlock()
}

// Err says why the kernel is not in a scope after Started; nil when it is.
func (t *scopeTree) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Memory watches the MemoryMax systemd put on the scope, for the
// out-of-memory kills it causes; nil when no limit was asked for.
func (t *scopeTree) Memory() (Memory, error) {
	if t.memLimit <= 0 {
		return nil, nil
	}
	m, err := NewV2Memory(t.Dir(), t.memLimit)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Dir is the scope's cgroup, "" before it was adopted.
func (t *scopeTree) Dir() string {
	if v2 := t.adopted(); v2 != nil {
		return v2.Dir()
	}
	return ""
}

func (t *scopeTree) adopted() *V2Tree {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.v2
}

// Pids is the scope's processes and those of the proc tree outside it
// (a process of a delegated scope may move itself out: see WithSweep).
func (t *scopeTree) Pids() ([]int, error) {
	more, err := t.proc.Pids()
	v2 := t.adopted()
	if v2 == nil || err != nil {
		return more, err
	}
	pids, err := v2.Pids()
	if err != nil {
		return nil, err
	}
	pids, out := addOutside(pids, more)
	t.mu.Lock()
	t.escaped = out
	t.mu.Unlock()
	return pids, nil
}

// Escaped is V2Tree.Escaped's, for the scope.
func (t *scopeTree) Escaped() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.escaped)
}

// Kill kills the scope's cgroup, then what is left of the proc tree.
func (t *scopeTree) Kill(ctx context.Context) (int, error) {
	var killed int
	if v2 := t.adopted(); v2 != nil {
		n, err := v2.Kill(ctx)
		if err != nil {
			return n, err
		}
		killed = n
	}
	n, err := t.proc.Kill(ctx)
	return killed + n, err
}

func (t *scopeTree) Close() error {
	t.mu.Lock()
	if t.w != nil {
		t.w.Close()
		t.report.Close()
		t.report, t.w = nil, nil
	}
	t.mu.Unlock()
	err := t.proc.Close()
	if v2 := t.adopted(); v2 != nil {
		err = errors.Join(err, v2.Close())
	}
	return err
}
