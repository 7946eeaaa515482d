package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// envAlloc: a helper started with it set to N waits until it can read a
// byte from stdin (or stdin is closed), touches N MiB of fresh anonymous
// memory and exits 0. The wait lets the test move it into a memory cgroup
// before it allocates. The memory is mmapped outside the Go heap, so the
// race detector keeps no shadow of it and the helper's footprint is N MiB
// plus the runtime's.
const envAlloc = "CGROUP_TEST_ALLOC_MIB"

func init() {
	v := os.Getenv(envAlloc)
	if v == "" {
		return
	}
	mib, err := strconv.Atoi(v)
	if err != nil {
		fail("%s=%q: %v", envAlloc, v, err)
	}
	var b [1]byte
	for {
		if _, err := unix.Read(0, b[:]); err != unix.EINTR {
			break
		}
	}
	mem, err := unix.Mmap(-1, 0, mib<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		fail("mmap %d MiB: %v", mib, err)
	}
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	os.Exit(0)
}

// startAlloc starts a helper that touches mib MiB once released; before
// the release, move is called with its pid (nil: no move). It returns the
// exit status.
func startAlloc(t *testing.T, mib int, sys *syscall.SysProcAttr, move func(pid int) error) proc.ExitStatus {
	t.Helper()
	exe, err := os.Executable()
	testutil.NoErr(t, err)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(p[0]), "alloc-r"), os.NewFile(uintptr(p[1]), "alloc-w")
	defer r.Close()
	defer w.Close()
	if sys == nil {
		sys = &syscall.SysProcAttr{}
	}
	sys.Pdeathsig = syscall.SIGKILL
	// GORACE: a race-enabled helper otherwise sleeps 1 s at exit.
	env := append(os.Environ(), envAlloc+"="+strconv.Itoa(mib), "GORACE=atexit_sleep_ms=0")
	attr := &syscall.ProcAttr{Env: env,
		Files: []uintptr{r.Fd(), 1, 2}, Sys: sys}
	pid, exited, err := testReaper.StartProcess(exe, []string{exe, "-test.run=^$"}, attr)
	testutil.NoErr(t, err)
	r.Close()
	if move != nil {
		if err := move(pid); err != nil {
			unix.Kill(pid, unix.SIGKILL)
			<-exited
			t.Fatal(err)
		}
	}
	w.Close() // release it
	select {
	case es := <-exited:
		return es
	case <-time.After(60 * time.Second):
		unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("alloc helper %d (%d MiB) did not exit", pid, mib)
		return proc.ExitStatus{}
	}
}

func killedBySIGKILL(es proc.ExitStatus) bool {
	return es.Status.Signaled() && es.Status.Signal() == unix.SIGKILL
}

func newTestV1Memory(t *testing.T, limit int64) *V1Memory {
	t.Helper()
	_, parent := requireV1(t, "memory")
	m, err := NewV1Memory(parent, fmt.Sprintf("mem-%d-%d", os.Getpid(), treeSeq.Add(1)), limit)
	if err != nil {
		testutil.RequireOrSkip(t, "needs a writable v1 memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if _, err := os.Stat(m.Where()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left behind (stat: %v)", m.Where(), err)
		}
	})
	return m
}

func TestV1MemoryOOMKill(t *testing.T) {
	m := newTestV1Memory(t, 64<<20)
	if m.Limit() != 64<<20 {
		t.Errorf("Limit() = %d, want %d", m.Limit(), 64<<20)
	}
	t.Logf("%s, swap limited: %v", m.Where(), m.SwapLimited())
	es := startAlloc(t, 512, nil, m.Add)
	if !killedBySIGKILL(es) {
		t.Fatalf("512 MiB in a 64 MiB cgroup: %v, want signal SIGKILL", es)
	}
	n, err := m.OOMKills()
	if err != nil || n < 1 {
		t.Fatalf("OOMKills() = %d, %v; want ≥ 1", n, err)
	}
	// Close waits out EBUSY while the killed process finishes exiting.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.Where()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close: stat %s: %v", m.Where(), err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	testutil.WaitNoZombies(t)
}

func TestV1MemoryUnderLimit(t *testing.T) {
	m := newTestV1Memory(t, 64<<20)
	if es := startAlloc(t, 8, nil, m.Add); es.Code() != 0 {
		t.Fatalf("8 MiB in a 64 MiB cgroup: %v, want exit code 0", es)
	}
	if n, err := m.OOMKills(); err != nil || n != 0 {
		t.Fatalf("OOMKills() = %d, %v; want 0", n, err)
	}
}

// An empty leftover cgroup of the same name is replaced.
func TestV1MemoryLeftover(t *testing.T) {
	_, parent := requireV1(t, "memory")
	name := fmt.Sprintf("mem-%d-%d", os.Getpid(), treeSeq.Add(1))
	dir := filepath.Join(parent, "tfgpu-"+name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		testutil.RequireOrSkip(t, "needs a writable v1 memory cgroup: %v", err)
	}
	t.Cleanup(func() { unix.Rmdir(dir) })
	m, err := NewV1Memory(parent, name, 32<<20)
	testutil.NoErr(t, err)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close: stat %s: %v", dir, err)
	}
}

// NewMemoryLimit picks what the host offers; on the test machine (hybrid,
// memory on v1) that is v1.
func TestNewMemoryLimit(t *testing.T) {
	l := rootLayout(t)
	name := fmt.Sprintf("mem-%d-%d", os.Getpid(), treeSeq.Add(1))
	m, how, err := NewMemoryLimit(l, name, 300<<20)
	if err != nil {
		testutil.RequireOrSkip(t, "no memory limit on this host: %v", err)
	}
	t.Logf("layout %s: %s", l.Kind, how)
	if m.Limit() != 300<<20 || filepath.Base(m.Where()) != "tfgpu-"+name || !strings.Contains(how, m.Where()) {
		t.Errorf("Limit() = %d, Where() = %q, how = %q", m.Limit(), m.Where(), how)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.Where()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close: stat %s: %v", m.Where(), err)
	}
}

func TestNewMemoryLimitErrors(t *testing.T) {
	for _, c := range []struct {
		l     Layout
		name  string
		limit int64
		want  string
	}{
		{Layout{}, "a/b", 1 << 20, "bad name"},
		{Layout{}, "k", 0, "bad limit"},
		{Layout{Kind: LayoutNone}, "k", 1 << 20, "no cgroup2 tree of our own, and no v1 memory hierarchy is mounted"},
	} {
		_, _, err := NewMemoryLimit(c.l, c.name, c.limit)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("NewMemoryLimit(%+v, %q, %d): %v, want one line with %q", c.l, c.name, c.limit, err, c.want)
		}
	}
	// A v2 tree without the memory controller and no v1 memory: the error
	// says what the v2 tree offers.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("hugetlb\n"), 0o644)
	_, _, err := NewMemoryLimit(Layout{Kind: LayoutV2, V2Mount: dir, V2Self: dir}, "k", 1<<20)
	if err == nil || !strings.Contains(err.Error(), `offers no memory controller (cgroup.controllers: "hugetlb")`) {
		t.Errorf("v2 without memory: %v", err)
	}
}

// The v2 mechanism on a fake cgroup directory (the test machine cannot
// enable memory on its v2 tree).
func TestV2MemoryFake(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "tfgpu-k")
	write := func(path, s string) {
		t.Helper()
		testutil.NoErr(t, os.WriteFile(path, []byte(s), 0o644))
	}
	os.Mkdir(dir, 0o755)
	write(filepath.Join(parent, "cgroup.controllers"), "cpu io\n")
	// No memory.max and no memory controller in the parent.
	if _, err := newV2Memory(dir, 1<<20); err == nil || !strings.Contains(err.Error(), "offers no memory controller") {
		t.Errorf("no controller: %v", err)
	}
	// The controller is available: it is enabled in the parent.
	write(filepath.Join(parent, "cgroup.controllers"), "cpu io memory\n")
	write(filepath.Join(parent, "cgroup.subtree_control"), "")
	if _, err := newV2Memory(dir, 1<<20); err == nil || !strings.Contains(err.Error(), "memory.max") {
		t.Errorf("fake enable: %v, want an error about memory.max", err) // the fake kernel made none
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control")); string(b) != "+memory" {
		t.Errorf("subtree_control = %q, want +memory", b)
	}
	write(filepath.Join(dir, "memory.max"), "max\n")
	write(filepath.Join(dir, "memory.events"), "low 0\nhigh 0\nmax 7\noom 3\noom_kill 2\noom_group_kill 0\n")
	write(filepath.Join(dir, "cgroup.procs"), "")
	m, err := newV2Memory(dir, 300<<20)
	testutil.NoErr(t, err)
	if b, _ := os.ReadFile(filepath.Join(dir, "memory.max")); string(b) != strconv.Itoa(300<<20) {
		t.Errorf("memory.max = %q", b)
	}
	if n, err := m.OOMKills(); n != 0 || err != nil {
		t.Errorf("OOMKills() = %d, %v; want 0 (2 counted before the limit)", n, err)
	}
	write(filepath.Join(dir, "memory.events"), "oom 4\noom_kill 3\n")
	if n, err := m.OOMKills(); n != 1 || err != nil {
		t.Errorf("OOMKills() = %d, %v; want 1", n, err)
	}
	if err := m.Add(42); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("Close removed the Tree's directory: %v", err)
	}
	if _, err := NewV2Memory(dir, 1<<20); err == nil || !strings.Contains(err.Error(), "not a cgroup2 file system") {
		t.Errorf("NewV2Memory on a plain directory: %v", err)
	}
}

// The real v2 mechanism: where the supervisor's v2 cgroup offers the memory
// controller. Skipped otherwise (the test machine, a hybrid host, keeps
// memory on v1); in CI it fails when the controller is offered but cannot
// be used.
func TestV2MemoryOOMKill(t *testing.T) {
	l := rootLayout(t)
	if l.V2Self == "" {
		testutil.RequireOrSkip(t, "no cgroup v2 tree of our own (layout %q)", l.Kind)
	}
	ctrl, err := readControllers(filepath.Join(l.V2Self, "cgroup.controllers"))
	if err != nil || !slices.Contains(ctrl, "memory") {
		// On a hybrid host the memory controller is bound to its v1
		// hierarchy and cannot be in the v2 one: a fact of the host kind
		// (TestV1Memory* cover it there). On a pure v2 host it is a
		// delegation problem, which CI must not hide.
		msg := fmt.Sprintf("the cgroup2 tree at %s offers no memory controller (cgroup.controllers %q, %v)", l.V2Self, ctrl, err)
		if l.Kind != LayoutV2 {
			t.Skip(msg + "; layout " + l.Kind)
		}
		testutil.RequireOrSkip(t, "%s", msg)
	}
	parent := requireCgroupV2(t)
	tree, err := NewV2Tree(context.Background(), parent, fmt.Sprintf("mem-%d-%d", os.Getpid(), treeSeq.Add(1)))
	testutil.NoErr(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tree.Kill(ctx)
		if err := tree.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	m, err := NewV2Memory(tree.Dir(), 64<<20)
	if err != nil {
		testutil.RequireOrSkip(t, "v2 memory controller offered but not usable: %v", err)
	}
	defer m.Close()
	sys := &syscall.SysProcAttr{}
	if err := tree.Configure(sys); err != nil {
		t.Fatal(err)
	}
	if es := startAlloc(t, 8, sys, nil); es.Code() != 0 {
		t.Fatalf("8 MiB under 64 MiB: %v, want exit code 0", es)
	}
	sys = &syscall.SysProcAttr{}
	if err := tree.Configure(sys); err != nil {
		t.Fatal(err)
	}
	if es := startAlloc(t, 512, sys, nil); !killedBySIGKILL(es) {
		t.Fatalf("512 MiB under 64 MiB: %v, want signal SIGKILL", es)
	}
	if n, err := m.OOMKills(); err != nil || n < 1 {
		t.Fatalf("OOMKills() = %d, %v; want ≥ 1", n, err)
	}
}
