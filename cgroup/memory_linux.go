package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Memory is a memory limit on a set of processes, and the count of the
// out-of-memory kills it caused. Implementations: V2Memory (memory.max of a
// cgroup2 directory) and V1Memory (a v1 memory cgroup of its own).
type Memory interface {
	// Limit is the limit in bytes.
	Limit() int64
	// Add moves pid into the limited cgroup; children it forks afterwards
	// are born there. Memory the process charged before the move stays
	// charged where it was.
	Add(pid int) error
	// OOMKills is the number of processes the kernel's OOM killer killed
	// in the cgroup because of the limit, since the limit was set.
	OOMKills() (int, error)
	// Where is the cgroup directory.
	Where() string
	// Close removes what the limit created. Idempotent.
	Close() error
}

var (
	_ Memory = (*V2Memory)(nil)
	_ Memory = (*V1Memory)(nil)
)

// NewMemoryLimit limits the memory of the tree called name (the name NewV2Tree
// got) to limit bytes, with the mechanism the layout offers:
//
//   - cgroup v2, when the supervisor's own v2 cgroup (l.V2Self) lists the
//     memory controller in cgroup.controllers: memory.max of the tree's
//     cgroup V2Self/tfgpu-NAME (NewV2Memory). Create the V2Tree first; if the
//     directory does not exist (another mode), it is created here, and
//     removed by Close.
//   - cgroup v1, when a v1 memory hierarchy is mounted (hybrid and v1
//     hosts): a memory cgroup tfgpu-NAME under the supervisor's own memory
//     cgroup (NewV1Memory); the caller Adds the leader right after spawning
//     it.
//
// how says which mechanism and where, for the log. When no limit can be
// applied the error says why in one line; the caller reports it and runs
// without a limit.
func NewMemoryLimit(l Layout, name string, limit int64) (m Memory, how string, err error) {
	if err := checkMemoryArgs(name, limit); err != nil {
		return nil, "", err
	}
	var v2why string
	switch {
	case l.V2Self == "":
		v2why = "no cgroup2 tree of our own"
	default:
		ctrl, err := readControllers(filepath.Join(l.V2Self, "cgroup.controllers"))
		switch {
		case err != nil:
			v2why = err.Error()
		case slices.Contains(ctrl, "memory"):
			m, err := newV2MemoryFor(filepath.Join(l.V2Self, "tfgpu-"+name), limit)
			if err != nil {
				return nil, "", fmt.Errorf("no memory limit: %w", err)
			}
			return m, fmt.Sprintf("cgroup v2 memory.max in %s", m.Where()), nil
		default:
			v2why = fmt.Sprintf("the cgroup2 tree at %s offers no memory controller (cgroup.controllers: %q)",
				l.V2Self, strings.Join(ctrl, " "))
		}
	}
	mount := l.V1["memory"]
	if mount == "" {
		return nil, "", fmt.Errorf("no memory limit: %s, and no v1 memory hierarchy is mounted", v2why)
	}
	parent, err := V1SelfDir(l, "memory")
	if err != nil {
		return nil, "", fmt.Errorf("no memory limit: %w", err)
	}
	m1, err := NewV1Memory(parent, name, limit)
	if err != nil {
		return nil, "", fmt.Errorf("no memory limit: %w", err)
	}
	how = fmt.Sprintf("cgroup v1 memory.limit_in_bytes in %s (%s)", m1.Where(), v2why)
	if !m1.swapLimited {
		how += "; swap not limited (no memory.memsw.limit_in_bytes)"
	}
	return m1, how, nil
}

func checkMemoryArgs(name string, limit int64) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("memory limit: bad name %q", name)
	}
	if limit <= 0 {
		return fmt.Errorf("memory limit: bad limit %d bytes", limit)
	}
	return nil
}

// V2Memory is a limit in a cgroup2 directory: memory.max, and the oom_kill
// count of memory.events.
type V2Memory struct {
	dir      string
	limit    int64
	baseline int  // oom_kill when the limit was set (a reused cgroup has counted before)
	owned    bool // created here, so Close removes it
	mu       sync.Mutex
	closed   bool
}

// NewV2Memory writes limit to dir/memory.max; dir is a cgroup2 directory
// that exists, normally a V2Tree's. If dir has no memory.max yet, the
// memory controller is enabled in the parent's cgroup.subtree_control
// first; that fails (EBUSY) when the parent has processes of its own and is
// not the root (the "no internal processes" rule of cgroup v2), so the
// supervisor must then run in a leaf cgroup of its own. Swap is left alone:
// memory.swap.max keeps its value (normally "max"), so on a host with swap
// the tree can swap out beyond the limit; memory.max still bounds what it
// holds in RAM. Close does not remove dir, which the Tree owns, and leaves
// the controller enabled in the parent.
func NewV2Memory(dir string, limit int64) (*V2Memory, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("memory limit: bad limit %d bytes", limit)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("memory limit in %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("memory limit in %s: not a cgroup2 file system", dir)
	}
	return newV2Memory(dir, limit)
}

// newV2Memory is NewV2Memory without the file system check (tests use a
// fake cgroup directory).
func newV2Memory(dir string, limit int64) (*V2Memory, error) {
	max := filepath.Join(dir, "memory.max")
	if _, err := os.Stat(max); errors.Is(err, os.ErrNotExist) {
		parent := filepath.Dir(dir)
		ctrl, err := readControllers(filepath.Join(parent, "cgroup.controllers"))
		if err != nil {
			return nil, fmt.Errorf("memory limit in %s: %w", dir, err)
		}
		if !slices.Contains(ctrl, "memory") {
			return nil, fmt.Errorf("memory limit in %s: %s offers no memory controller (cgroup.controllers: %q)",
				dir, parent, strings.Join(ctrl, " "))
		}
		if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+memory"); err != nil {
			why := ""
			if errors.Is(err, unix.EBUSY) {
				why = " (it has processes of its own: cgroup v2 enables controllers for children only in a cgroup without processes, so the supervisor must run in a leaf cgroup)"
			}
			return nil, fmt.Errorf("memory limit in %s: enable the memory controller in %s/cgroup.subtree_control: %w%s",
				dir, parent, err, why)
		}
	} else if err != nil {
		return nil, fmt.Errorf("memory limit in %s: %w", dir, err)
	}
	if err := writeFile(max, strconv.FormatInt(limit, 10)); err != nil {
		return nil, fmt.Errorf("memory limit: write %d to %s: %w", limit, max, err)
	}
	base, err := readKey(filepath.Join(dir, "memory.events"), "oom_kill")
	if err != nil {
		return nil, fmt.Errorf("memory limit in %s: %w", dir, err)
	}
	return &V2Memory{dir: dir, limit: limit, baseline: base}, nil
}

// newV2MemoryFor is NewV2Memory for NewMemoryLimit: it creates dir when no
// Tree did, and Close then removes it.
func newV2MemoryFor(dir string, limit int64) (*V2Memory, error) {
	owned := false
	if err := os.Mkdir(dir, 0o755); err == nil {
		owned = true
	} else if !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("memory limit: create cgroup %s: %w", dir, err)
	}
	m, err := NewV2Memory(dir, limit)
	if err != nil {
		if owned {
			_ = unix.Rmdir(dir)
		}
		return nil, err
	}
	m.owned = owned
	return m, nil
}

func (m *V2Memory) Limit() int64  { return m.limit }
func (m *V2Memory) Where() string { return m.dir }

// Add writes pid to cgroup.procs. With a V2Tree the leader is born in the
// cgroup (CLONE_INTO_CGROUP), so Add is not needed.
func (m *V2Memory) Add(pid int) error {
	if err := writeFile(filepath.Join(m.dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("move %d into memory cgroup %s: %w", pid, m.dir, err)
	}
	return nil
}

// OOMKills reads oom_kill of memory.events (which counts the cgroup and its
// descendants), less its value when the limit was set.
func (m *V2Memory) OOMKills() (int, error) {
	n, err := readKey(filepath.Join(m.dir, "memory.events"), "oom_kill")
	if err != nil {
		return 0, fmt.Errorf("read OOM kills of %s: %w", m.dir, err)
	}
	return n - m.baseline, nil
}

// Close removes the directory only when NewMemoryLimit created it (no
// Tree did); see V1Memory.Close for the wait.
func (m *V2Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || !m.owned {
		m.closed = true
		return nil
	}
	if err := rmdirWait(m.dir); err != nil {
		return fmt.Errorf("remove memory cgroup: %w", err)
	}
	m.closed = true
	return nil
}

// V1Memory is a v1 memory cgroup of its own for the tree.
type V1Memory struct {
	dir         string
	limit       int64
	swapLimited bool // memory.memsw.limit_in_bytes set too
	mu          sync.Mutex
	closed      bool
}

// NewV1Memory creates the v1 memory cgroup parent/tfgpu-<name> (parent is a
// directory of a v1 memory hierarchy, normally the supervisor's own memory
// cgroup: see NewMemoryLimit) and limits it to limit bytes:
// memory.limit_in_bytes, then memory.memsw.limit_in_bytes (memory plus
// swap) to the same value where the file exists (the kernel was booted with
// swap accounting), so that the limit cannot be escaped by swapping; the
// kernel requires memsw ≥ limit, hence the order. A failure to set memsw is
// not an error (the swap is then not limited).
//
// A leftover cgroup of the same name (from a supervisor that died) is
// removed and created anew, so that its counters start at zero; if it still
// has processes that fails, with an error that names them: kill them first.
func NewV1Memory(parent, name string, limit int64) (*V1Memory, error) {
	if err := checkMemoryArgs(name, limit); err != nil {
		return nil, err
	}
	dir := filepath.Join(parent, "tfgpu-"+name)
	if err := os.Mkdir(dir, 0o755); errors.Is(err, os.ErrExist) {
		if err := unix.Rmdir(dir); err != nil {
			pids, _ := readProcs(dir)
			return nil, fmt.Errorf("memory limit: leftover cgroup %s cannot be removed (processes %v): %w", dir, pids, err)
		}
		err = os.Mkdir(dir, 0o755)
		if err != nil {
			return nil, fmt.Errorf("memory limit: create cgroup %s: %w", dir, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("memory limit: create cgroup %s: %w", dir, err)
	}
	m := &V1Memory{dir: dir, limit: limit}
	lim := strconv.FormatInt(limit, 10)
	if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), lim); err != nil {
		_ = unix.Rmdir(dir)
		return nil, fmt.Errorf("memory limit: write %s to %s/memory.limit_in_bytes: %w", lim, dir, err)
	}
	// The kernel rounds the limit up to a whole page; read it back.
	if b, err := os.ReadFile(filepath.Join(dir, "memory.limit_in_bytes")); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			m.limit = n
		}
	}
	if writeFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), strconv.FormatInt(m.limit, 10)) == nil {
		m.swapLimited = true
	}
	return m, nil
}

func (m *V1Memory) Limit() int64  { return m.limit }
func (m *V1Memory) Where() string { return m.dir }

// SwapLimited reports whether memory.memsw.limit_in_bytes was set too.
func (m *V1Memory) SwapLimited() bool { return m.swapLimited }

// Add writes pid to cgroup.procs, which moves all its threads; children it
// forks afterwards are born in the cgroup. Call it right after spawning the
// leader: a child the leader forks before the move stays outside, and the
// memory the leader touched before it (after exec, little) stays charged to
// its old cgroup (v1 moves charges only with memory.move_charge_at_immigrate,
// which recent kernels deprecate; it is not used).
func (m *V1Memory) Add(pid int) error {
	if err := writeFile(filepath.Join(m.dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("move %d into memory cgroup %s: %w", pid, m.dir, err)
	}
	return nil
}

// OOMKills reads oom_kill of memory.oom_control (Linux 4.13). On older
// kernels it fails with an error wrapping ErrUnsupported that gives
// memory.failcnt (the number of times usage hit the limit, which includes
// reclaims that succeeded) as a hint.
func (m *V1Memory) OOMKills() (int, error) {
	n, err := readKey(filepath.Join(m.dir, "memory.oom_control"), "oom_kill")
	if errors.Is(err, errNoKey) {
		fc, _ := os.ReadFile(filepath.Join(m.dir, "memory.failcnt"))
		return 0, fmt.Errorf("read OOM kills of %s: no oom_kill in memory.oom_control (Linux < 4.13), memory.failcnt %s: %w",
			m.dir, strings.TrimSpace(string(fc)), ErrUnsupported)
	}
	if err != nil {
		return 0, fmt.Errorf("read OOM kills of %s: %w", m.dir, err)
	}
	return n, nil
}

// Close removes the cgroup. rmdir fails with EBUSY while a process is in
// it, including one that was SIGKILLed and has not finished exiting (an
// OOM-killed process releasing a large memory takes a moment), so Close
// retries for up to 2 s; it does not kill. Memory still charged to the
// cgroup (page cache) does not prevent the removal: the kernel moves it to
// the parent. Idempotent; once the directory is gone it returns nil.
func (m *V1Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	if err := rmdirWait(m.dir); err != nil {
		return fmt.Errorf("remove memory cgroup: %w", err)
	}
	m.closed = true
	return nil
}

// rmdirWait removes the cgroup directory dir, retrying EBUSY for 2 s.
func rmdirWait(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			pids, _ := readProcs(dir)
			return fmt.Errorf("rmdir %s (processes %v): %w", dir, pids, err)
		}
		time.Sleep(delay)
	}
}

// readControllers reads a cgroup.controllers file.
func readControllers(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

var errNoKey = errors.New("no such key")

// readKey reads the value of key in a flat-keyed cgroup file ("key value"
// lines: memory.events, memory.oom_control).
func readKey(path, key string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("parse %s: %q: %w", path, line, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("parse %s: %q: %w", path, key, errNoKey)
}
