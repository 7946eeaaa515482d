package cgroup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// requireFreezer returns the directories of the test process's own cgroups
// in the v1 freezer hierarchy and in the pids hierarchy ("" when that is not
// mounted). It fails in CI (CI=true) when they are missing or not writable,
// and skips elsewhere.
func requireFreezer(t *testing.T) (freezer, pids string) {
	t.Helper()
	l, freezer := requireV1(t, "freezer")
	var err error
	if l.V1["pids"] != "" {
		if pids, err = V1SelfDir(l, "pids"); err != nil {
			t.Logf("no pids cgroup: %v", err)
		}
	}
	probe, err := NewV1Tree(context.Background(), freezer, "", fmt.Sprintf("probe-%d", os.Getpid()))
	if err != nil {
		testutil.RequireOrSkip(t, "needs a writable cgroup v1 freezer: %v", err)
	}
	if err := probe.Close(); err != nil {
		t.Fatal(err)
	}
	return freezer, pids
}

// startV1Tree starts a helper tree in a new freezer cgroup; its cleanup
// kills it, closes it and checks that the directories are gone.
func startV1Tree(t *testing.T, freezer, pids string, noStarted bool, mode string, extra ...string) (*tree, *V1Tree) {
	t.Helper()
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), treeSeq.Add(1))
	v1, err := NewV1Tree(context.Background(), freezer, pids, name, WithExclude(testReaper.Owns))
	testutil.NoErr(t, err)
	if pids != "" && v1.PidsDir() == "" {
		t.Errorf("no pids cgroup under %s", pids)
	}
	tr := &tree{Tree: v1, pidfile: filepath.Join(t.TempDir(), "pids")}
	tr.cleanupCgroups(t, v1.Dir(), v1.PidsDir())
	tr.spawn(t, new(false), noStarted, mode, extra...)
	return tr, v1
}

// v1CgroupOf returns pid's cgroup path in the hierarchy of controller.
func v1CgroupOf(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	testutil.NoErr(t, err)
	p, _, err := parseSelfV1(b, controller)
	testutil.NoErr(t, err)
	return p
}

func TestParseV1SelfDir(t *testing.T) {
	const mi = `25 30 0:23 / /sys/fs/cgroup rw - tmpfs tmpfs ro,mode=755
33 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate
37 25 0:32 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
38 25 0:33 /kubepods /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
39 25 0:34 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
`
	const cg = `9:pids:/kubepods/pod1
6:freezer:/user.slice
2:cpu,cpuacct:/a
1:name=systemd:/init.scope
0::/
`
	tests := []struct{ mnt, ctrl, want string }{
		{"/sys/fs/cgroup/freezer", "freezer", "/sys/fs/cgroup/freezer/user.slice"},
		{"/sys/fs/cgroup/pids", "pids", "/sys/fs/cgroup/pids/pod1"},
		{"/sys/fs/cgroup/cpu,cpuacct", "cpuacct", "/sys/fs/cgroup/cpu,cpuacct/a"},
		{"/sys/fs/cgroup/memory", "memory", ""},   // no line
		{"/sys/fs/cgroup/freezer", "pids", ""},    // no pids mount there
		{"/sys/fs/cgroup/freezer", "systemd", ""}, // name=systemd is no controller
		{"/sys/fs/cgroup/pids", "freezer", ""},    // wrong mount
		{"/sys/fs/cgroup/unified", "freezer", ""}, // cgroup2
		{"/sys/fs/cgroup", "freezer", ""},         // tmpfs
		{"/sys/fs/cgroup/cpu,cpuacct", "cpu", "/sys/fs/cgroup/cpu,cpuacct/a"},
	}
	for _, tc := range tests {
		got, err := parseV1SelfDir([]byte(mi), []byte(cg), tc.mnt, tc.ctrl)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("parseV1SelfDir(%s, %s) = %q, %v; want %q", tc.mnt, tc.ctrl, got, err, tc.want)
		}
	}
	// A cgroup outside the mount's root is not visible.
	if got, err := parseV1SelfDir([]byte(mi), []byte("9:pids:/other\n"), "/sys/fs/cgroup/pids", "pids"); err == nil {
		t.Errorf("outside the mount's root: %q, want an error", got)
	}
	if _, _, err := parseSelfV1([]byte("6:freezer:relative\n"), "freezer"); err == nil {
		t.Errorf("relative path: want an error")
	}
}

// TestV1Started: the leader is outside the cgroup until Started moves it.
func TestV1Started(t *testing.T) {
	freezer, pidsParent := requireFreezer(t)
	tr, v1 := startV1Tree(t, freezer, pidsParent, true, "sleep")
	waitReported(t, tr.pidfile, 1)
	want := "/" + filepath.Base(v1.Dir())
	if p := v1CgroupOf(t, tr.leader, "freezer"); strings.HasSuffix(p, want) {
		t.Errorf("before Started: leader already in %q", p)
	}
	tr.Started(tr.leader)
	if p := v1CgroupOf(t, tr.leader, "freezer"); !strings.HasSuffix(p, want) {
		t.Errorf("after Started: leader in freezer cgroup %q, want .../%s", p, want)
	}
	if v1.PidsDir() != "" {
		if p := v1CgroupOf(t, tr.leader, "pids"); !strings.HasSuffix(p, want) {
			t.Errorf("after Started: leader in pids cgroup %q, want .../%s", p, want)
		}
	}
}

// TestV1TreeNames: a tree's name is one path element, its parent a v1
// freezer cgroup (TestTreeContract runs the rest of a tree's life).
func TestV1TreeNames(t *testing.T) {
	freezer, pidsParent := requireFreezer(t)
	ctx := context.Background()
	for _, name := range []string{"", ".", "..", "a/b"} {
		if v, err := NewV1Tree(ctx, freezer, "", name); err == nil {
			v.Close()
			t.Errorf("NewV1Tree(%q) succeeded", name)
		}
	}
	if _, err := NewV1Tree(ctx, t.TempDir(), "", "x"); err == nil {
		t.Errorf("NewV1Tree outside cgroup v1 succeeded")
	}
	if pidsParent != "" {
		if v, err := NewV1Tree(ctx, pidsParent, "", fmt.Sprintf("notfreezer-%d", os.Getpid())); err == nil {
			v.Close()
			t.Errorf("NewV1Tree in the pids hierarchy succeeded")
		}
	}
}

// TestV1Leftover: a cgroup of the same name with processes in it (a
// supervisor that died), even one left FROZEN (it died during a Kill), is
// emptied and reused.
func TestV1Leftover(t *testing.T) {
	freezer, pidsParent := requireFreezer(t)
	for _, frozen := range []bool{false, true} {
		t.Run(fmt.Sprintf("frozen=%v", frozen), func(t *testing.T) {
			old, oldV1 := startV1Tree(t, freezer, pidsParent, false, "daemon")
			ids := waitReported(t, old.pidfile, 3)
			dir := oldV1.Dir()
			if frozen {
				if err := writeFile(filepath.Join(dir, "freezer.state"), "FROZEN"); err != nil {
					t.Fatal(err)
				}
			}
			name := strings.TrimPrefix(filepath.Base(dir), "tfgpu-")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// The old supervisor's sweep is gone with it: only the cgroup
			// counts, so processes that escaped the move may survive.
			v1, err := NewV1Tree(ctx, freezer, pidsParent, name)
			testutil.NoErr(t, err)
			defer v1.Close()
			if left, err := readProcs(dir); v1.Dir() != dir || err != nil || len(left) > 0 {
				t.Errorf("NewV1Tree on leftover: dir %s (want %s), left %v, %v", v1.Dir(), dir, left, err)
			}
			if alive := aliveIDs(t, ids); len(alive) == len(ids) {
				t.Errorf("leftover: nothing was killed")
			}
			if es := old.exitStatus(t); es.Code() != 137 {
				t.Errorf("leftover leader exit = %q, want signal SIGKILL", es)
			}
		})
	}
}

// TestV1KillInterruptedByTheEngine: an engine's stop (podman stop's
// SIGKILL after its timeout, scancel's) can kill the supervisor during its
// own Kill, and then SIGKILLs what is left. With a pids cgroup the tree is
// fenced (pids.max 0), never frozen, so that kill empties it; a freeze
// there left the kernel FROZEN, its processes in D state for good (seen
// under podman --privileged with runc on a v1 host).
func TestV1KillInterruptedByTheEngine(t *testing.T) {
	freezer, pidsParent := requireFreezer(t)
	if pidsParent == "" {
		testutil.RequireOrSkip(t, "needs the cgroup v1 pids controller")
	}
	tr, v1 := startV1Tree(t, freezer, pidsParent, false, "daemon")
	waitReported(t, tr.pidfile, 3)
	rounds := 0
	testKillRound = func(k *V1Tree) {
		if k != v1 {
			return
		}
		rounds++
		if rounds > 1 {
			return
		}
		if st, err := FreezerState(k.Dir()); err != nil || st != "THAWED" {
			t.Errorf("freezer.state during the kill: %q, %v; want THAWED", st, err)
		}
		if b, err := os.ReadFile(filepath.Join(k.PidsDir(), "pids.max")); err != nil || strings.TrimSpace(string(b)) != "0" {
			t.Errorf("pids.max during the kill: %q, %v; want 0", b, err)
		}
		// The engine's kill, here, where the supervisor died.
		pids, err := readProcs(k.Dir())
		if err != nil {
			t.Error(err)
			return
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := pollUntil(ctx, func() (bool, error) { left, err := readProcs(k.Dir()); return len(left) == 0, err }); err != nil {
			left, _ := readProcs(k.Dir())
			t.Errorf("the engine's SIGKILL during our kill: processes %v still in %s: %v", left, k.Dir(), err)
		}
	}
	defer func() { testKillRound = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := v1.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if rounds == 0 {
		t.Fatal("the kill ran no round")
	}
	if b, err := os.ReadFile(filepath.Join(v1.PidsDir(), "pids.max")); err != nil || strings.TrimSpace(string(b)) != "max" {
		t.Errorf("pids.max after the kill: %q, %v; want max again", b, err)
	}
	if alive := aliveIDs(t, readPidfile(t, tr.pidfile)); len(alive) > 0 {
		t.Errorf("alive after Kill: %v", alive)
	}
}

func TestV1Cycles(t *testing.T) {
	freezer, pidsParent := requireFreezer(t)
	before := mine(tfgpuCgroups(t, freezer))
	for i := range 20 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			tr, _ := startV1Tree(t, freezer, pidsParent, false, "daemon")
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
			if alive := aliveIDs(t, readPidfile(t, tr.pidfile)); len(alive) > 0 {
				t.Errorf("alive after Kill: %v", alive)
			}
		})
	}
	testutil.WaitNoZombies(t)
	// Only this test process's cgroups: other programs on the host (the
	// wrapper's tests, run at the same time) may have theirs.
	if after := mine(tfgpuCgroups(t, freezer)); !slices.Equal(before, after) {
		t.Errorf("this test's freezer cgroups before %v, after %v", before, after)
	}
	if pidsParent != "" {
		if m := mine(tfgpuCgroups(t, pidsParent)); len(m) > 0 {
			t.Errorf("this test's pids cgroups after: %v", m)
		}
	}
}

// mine keeps the cgroups that startV1Tree of this test process named.
func mine(dirs []string) []string {
	prefix := fmt.Sprintf("tfgpu-test-%d-", os.Getpid())
	return slices.DeleteFunc(dirs, func(d string) bool { return !strings.HasPrefix(filepath.Base(d), prefix) })
}
