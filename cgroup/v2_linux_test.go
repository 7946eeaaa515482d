package cgroup

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// envCgfile: a helper started with it set appends "pid 0::PATH" (its own v2
// cgroup, read before the helper does anything else) to that file. This
// runs from init, before TestMain hands over to helper(), so that every
// helper mode reports it; with CLONE_INTO_CGROUP the line names the tree's
// cgroup from the process's first instant.
const envCgfile = "CGROUP_TEST_CGFILE"

func init() {
	path := os.Getenv(envCgfile)
	if os.Getenv(envMode) == "" || path == "" {
		return
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		fail("%v", err)
	}
	p, _, err := parseSelfV2(self)
	if err != nil {
		fail("%v", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fail("%v", err)
	}
	fmt.Fprintf(f, "%d %s\n", os.Getpid(), p)
	f.Close()
}

// requireRoot fails the test in CI (CI=true), where it must run, and skips
// it elsewhere.
func requireRoot(t *testing.T) {
	t.Helper()
	testutil.Integration(t)
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "needs root (euid %d)", os.Geteuid())
	}
}

// rootLayout is the host's cgroup layout, for a test that needs root.
func rootLayout(t *testing.T) Layout {
	t.Helper()
	requireRoot(t)
	l, err := DetectLayout()
	testutil.NoErr(t, err)
	return l
}

// requireV1 returns the layout and the test process's own cgroup in the
// v1 hierarchy of controller: it fails in CI (CI=true) where there is
// none (a pure v2 host), and skips elsewhere.
func requireV1(t *testing.T, controller string) (Layout, string) {
	t.Helper()
	l := rootLayout(t)
	if l.V1[controller] == "" {
		testutil.RequireOrSkip(t, "needs the cgroup v1 %s hierarchy: layout %q, v1 controllers %v", controller, l.Kind, l.V1)
	}
	dir, err := V1SelfDir(l, controller)
	if err != nil {
		testutil.RequireOrSkip(t, "needs its own cgroup v1 %s cgroup: %v", controller, err)
	}
	return l, dir
}

// requireCgroupV2 returns the directory of the test process's own v2
// cgroup, which must be writable and support cgroup.kill (Linux 5.14).
func requireCgroupV2(t *testing.T) string {
	t.Helper()
	l := rootLayout(t)
	if l.V2Self == "" {
		testutil.RequireOrSkip(t, "needs cgroup v2: layout %q, v2 mount %q", l.Kind, l.V2Mount)
	}
	// cgroup.kill is missing in the root cgroup by design, so probe a child.
	probe, err := NewV2Tree(context.Background(), l.V2Self, fmt.Sprintf("probe-%d", os.Getpid()))
	if err != nil {
		testutil.RequireOrSkip(t, "needs a writable cgroup v2 tree: %v", err)
	}
	_, kerr := os.Stat(filepath.Join(probe.Dir(), "cgroup.kill"))
	if err := probe.Close(); err != nil {
		t.Fatal(err)
	}
	if kerr != nil {
		testutil.RequireOrSkip(t, "needs cgroup.kill (Linux 5.14): %v", kerr)
	}
	return l.V2Self
}

var treeSeq atomic.Int64

// v2Spawn is how startV2Tree starts the leader.
type v2Spawn struct {
	cloneInto bool // CLONE_INTO_CGROUP; else WithoutCloneInto
	noStarted bool // do not call Started (the test calls it)
}

// startV2Tree starts a helper tree in a new cgroup under parent; its cleanup
// kills it, closes it and checks that the directory is gone.
func startV2Tree(t *testing.T, parent string, sp v2Spawn, mode string, extra ...string) (*tree, *V2Tree, string) {
	t.Helper()
	var opts []V2Option
	if !sp.cloneInto {
		opts = append(opts, WithoutCloneInto(WithExclude(testReaper.Owns)))
	}
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), treeSeq.Add(1))
	v2, err := NewV2Tree(context.Background(), parent, name, opts...)
	testutil.NoErr(t, err)
	dir := t.TempDir()
	tr := &tree{Tree: v2, pidfile: filepath.Join(dir, "pids")}
	cgfile := filepath.Join(dir, "cgroups")
	tr.cleanupCgroups(t, v2.Dir())
	tr.spawn(t, &sp.cloneInto, sp.noStarted, mode, append(extra, envCgfile+"="+cgfile)...)
	return tr, v2, cgfile
}

// cgroupOf returns the v2 cgroup path of pid, from /proc/PID/cgroup.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	testutil.NoErr(t, err)
	p, _, err := parseSelfV2(b)
	testutil.NoErr(t, err)
	return p
}

// selfReports returns what the helpers wrote to cgfile: pid -> cgroup path.
func selfReports(t *testing.T, cgfile string) map[int]string {
	t.Helper()
	f, err := os.Open(cgfile)
	testutil.NoErr(t, err)
	defer f.Close()
	m := map[int]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var pid int
		var p string
		if _, err := fmt.Sscan(sc.Text(), &pid, &p); err != nil {
			t.Fatalf("cgfile line %q: %v", sc.Text(), err)
		}
		m[pid] = p
	}
	return m
}

func populated(t *testing.T, dir string) bool {
	t.Helper()
	p, err := readPopulated(dir)
	testutil.NoErr(t, err)
	return p
}

// TestV2CloneInto proves that the leader is created in the cgroup: without
// Started, a cloned-into leader is in it, a fallback leader is not (until
// Started moves it).
func TestV2CloneInto(t *testing.T) {
	parent := requireCgroupV2(t)
	for _, cloneInto := range []bool{true, false} {
		t.Run(fmt.Sprintf("cloneInto=%v", cloneInto), func(t *testing.T) {
			tr, v2, cgfile := startV2Tree(t, parent, v2Spawn{cloneInto: cloneInto, noStarted: true}, "sleep")
			waitReported(t, tr.pidfile, 1)
			want := "/" + filepath.Base(v2.Dir())
			self := selfReports(t, cgfile)[tr.leader]
			if got := strings.HasSuffix(cgroupOf(t, tr.leader), want); got != cloneInto {
				t.Errorf("before Started: leader in cgroup %q, want in .../%s: %v", cgroupOf(t, tr.leader), want, cloneInto)
			}
			if got := strings.HasSuffix(self, want); got != cloneInto {
				t.Errorf("leader saw itself at start in %q, want in .../%s: %v", self, want, cloneInto)
			}
			tr.Started(tr.leader)
			if p := cgroupOf(t, tr.leader); !strings.HasSuffix(p, want) {
				t.Errorf("after Started: leader in cgroup %q, want .../%s", p, want)
			}
		})
	}
}

// TestV2TreeNames: a tree's name is one path element, its parent a v2
// cgroup (TestTreeContract runs the rest of a tree's life).
func TestV2TreeNames(t *testing.T) {
	parent := requireCgroupV2(t)
	ctx := context.Background()
	for _, name := range []string{"", ".", "..", "a/b"} {
		if v, err := NewV2Tree(ctx, parent, name); err == nil {
			v.Close()
			t.Errorf("NewV2Tree(%q) succeeded", name)
		}
	}
	if _, err := NewV2Tree(ctx, t.TempDir(), "x"); err == nil {
		t.Errorf("NewV2Tree outside cgroup2 succeeded")
	}
}

// TestV2Leftover: a cgroup of the same name with a process in it (a
// supervisor that died) is emptied and reused.
func TestV2Leftover(t *testing.T) {
	parent := requireCgroupV2(t)
	old, _, _ := startV2Tree(t, parent, v2Spawn{cloneInto: true}, "ignore-term")
	ids := waitReported(t, old.pidfile, 1)
	dir := old.Tree.(*V2Tree).Dir()
	name := strings.TrimPrefix(filepath.Base(dir), "tfgpu-")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v2, err := NewV2Tree(ctx, parent, name)
	testutil.NoErr(t, err)
	defer v2.Close()
	if v2.Dir() != dir || populated(t, dir) {
		t.Errorf("NewV2Tree on leftover: dir %s (want %s), populated %v", v2.Dir(), dir, populated(t, dir))
	}
	if alive := aliveIDs(t, ids); len(alive) > 0 {
		t.Errorf("leftover alive: %v", alive)
	}
	if es := old.exitStatus(t); es.Code() != 137 {
		t.Errorf("leftover exit = %q, want signal SIGKILL", es)
	}
	if v2.Leftovers() < 1 {
		t.Errorf("Leftovers() = %d, want the killed process counted", v2.Leftovers())
	}
	// A process cloned into the cgroup after the leftovers were killed
	// lives (reusing the killed cgroup got it SIGKILLed at birth on 6.18).
	attr := &syscall.SysProcAttr{}
	if err := v2.Configure(attr); err != nil {
		t.Fatal(err)
	}
	pid, exited, err := testReaper.StartProcess("/bin/sleep", []string{"sleep", "30"}, &syscall.ProcAttr{Sys: attr})
	testutil.NoErr(t, err)
	v2.Started(pid)
	select {
	case es := <-exited:
		t.Fatalf("a process cloned into the cleared cgroup died at birth: %s", es)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := v2.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	<-exited
}

func TestV2Cycles(t *testing.T) {
	parent := requireCgroupV2(t)
	before := tfgpuCgroups(t, parent)
	for i := range 20 {
		sp := v2Spawn{cloneInto: i%2 == 0}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			tr, _, _ := startV2Tree(t, parent, sp, "daemon")
			waitReported(t, tr.pidfile, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := tr.Kill(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tr.Close(); err != nil {
				t.Fatal(err)
			}
			tr.exitStatus(t)
		})
	}
	testutil.WaitNoZombies(t)
	if after := tfgpuCgroups(t, parent); !slices.Equal(before, after) {
		t.Errorf("tfgpu-* cgroups before %v, after %v", before, after)
	}
}

func tfgpuCgroups(t *testing.T, parent string) []string {
	t.Helper()
	// Only this test process's own: other packages' tests (run in
	// parallel by go test ./...) create tfgpu-* cgroups of their own.
	m, err := filepath.Glob(filepath.Join(parent, fmt.Sprintf("tfgpu-test-%d-*", os.Getpid())))
	testutil.NoErr(t, err)
	return m
}
