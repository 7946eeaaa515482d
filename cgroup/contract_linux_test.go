package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil/fakesystemd"
)

// contractMode is one way of containing a tree that TestTreeContract runs
// its contract against.
type contractMode struct {
	name string
	// open returns a new tree that no process was started in, and the
	// directories its Close removes; it skips (fails in CI) where the host
	// has no such mode.
	open func(t *testing.T) (Tree, []string)
	// start starts a helper tree (helper mode mode) in a new tree of this
	// mode, and returns the directories its Close removes.
	start func(t *testing.T, mode string, extra ...string) (*tree, []string)
	// killed checks what the mode promises of its tree once Kill returned.
	killed func(t *testing.T, dirs []string)
}

func contractModes() []contractMode {
	name := func() string { return fmt.Sprintf("test-%d-%d", os.Getpid(), treeSeq.Add(1)) }
	emptied := func(t *testing.T, dirs []string) {
		if populated(t, dirs[0]) {
			t.Errorf("cgroup %s populated after Kill", dirs[0])
		}
	}
	v2 := func(sp v2Spawn) contractMode {
		return contractMode{
			name: fmt.Sprintf("v2/cloneInto=%v", sp.cloneInto),
			open: func(t *testing.T) (Tree, []string) {
				var opts []V2Option
				if !sp.cloneInto {
					opts = append(opts, WithoutCloneInto(WithExclude(testReaper.Owns)))
				}
				v, err := NewV2Tree(context.Background(), requireCgroupV2(t), name(), opts...)
				testutil.NoErr(t, err)
				return v, []string{v.Dir()}
			},
			start: func(t *testing.T, mode string, extra ...string) (*tree, []string) {
				tr, v, _ := startV2Tree(t, requireCgroupV2(t), sp, mode, extra...)
				return tr, []string{v.Dir()}
			},
			killed: emptied,
		}
	}
	return []contractMode{
		{
			name: ModeProc,
			open: func(t *testing.T) (Tree, []string) {
				return NewProcTree(os.Getpid(), WithExclude(testReaper.Owns)), nil
			},
			start: func(t *testing.T, mode string, extra ...string) (*tree, []string) {
				return startTree(t, mode, extra...), nil
			},
			killed: func(*testing.T, []string) {},
		},
		v2(v2Spawn{cloneInto: true}),
		v2(v2Spawn{cloneInto: false}),
		v1Mode(name, true),
		v1Mode(name, false),
		systemdMode(name, emptied),
	}
}

// v1Mode is ModeV1 with the pids cgroup (the kill's fence) or without it
// (freeze rounds), both of which NewV1Tree can make.
func v1Mode(name func() string, withPids bool) contractMode {
	v1dirs := func(v *V1Tree) []string {
		if v.PidsDir() == "" {
			return []string{v.Dir()}
		}
		return []string{v.Dir(), v.PidsDir()}
	}
	dirs := func(t *testing.T) (string, string) {
		freezer, pids := requireFreezer(t)
		if withPids && pids == "" {
			testutil.RequireOrSkip(t, "needs the cgroup v1 pids controller")
		}
		if !withPids {
			pids = ""
		}
		return freezer, pids
	}
	return contractMode{
		name: map[bool]string{true: ModeV1, false: ModeV1 + "/no-pids"}[withPids],
		open: func(t *testing.T) (Tree, []string) {
			freezer, pids := dirs(t)
			v, err := NewV1Tree(context.Background(), freezer, pids, name(), WithExclude(testReaper.Owns))
			testutil.NoErr(t, err)
			return v, v1dirs(v)
		},
		start: func(t *testing.T, mode string, extra ...string) (*tree, []string) {
			freezer, pids := dirs(t)
			tr, v := startV1Tree(t, freezer, pids, false, mode, extra...)
			return tr, v1dirs(v)
		},
		killed: func(t *testing.T, dirs []string) {
			if left, err := readProcs(dirs[0]); err != nil || len(left) > 0 {
				t.Errorf("cgroup.procs after Kill = %v, %v", left, err)
			}
			if b, err := os.ReadFile(filepath.Join(dirs[0], "freezer.state")); err != nil || strings.TrimSpace(string(b)) != "THAWED" {
				t.Errorf("freezer.state after Kill = %q, %v; want THAWED", b, err)
			}
			if len(dirs) > 1 {
				if b, err := os.ReadFile(filepath.Join(dirs[1], "pids.max")); err != nil || strings.TrimSpace(string(b)) != "max" {
					t.Errorf("pids.max after Kill = %q, %v; want max", b, err)
				}
			}
		},
	}
}

// systemdMode is ModeSystemd, a v2 cgroup that systemd-run --user --scope
// makes (scope_linux.go), against fakesystemd's user manager and
// systemd-run (the host needs no systemd; wrapper's TestSystemd* run the
// supervisor against the same fake). The tree is what Open makes of the
// choice, systemdScope finding the fake's socket in XDG_RUNTIME_DIR and its
// systemd-run first on PATH; the scope is a real cgroup2 directory under
// the fake's app.slice, below this process's own cgroup. The leader is
// started through Launch, and start fails unless it was adopted in the
// scope: the proc tree behind the scope (all the tree is until the scope
// is adopted, or when systemd-run failed) must not pass for the mode.
// "unstarted" runs as for the other modes: before a launch there is no
// scope, and no directory for Close to remove.
func systemdMode(name func() string, emptied func(*testing.T, []string)) contractMode {
	open := func(t *testing.T) (*scopeTree, *fakesystemd.Manager) {
		t.Helper()
		m := fakesystemd.Start(t, requireCgroupV2(t), os.Getuid())
		exe, err := os.Executable()
		testutil.NoErr(t, err)
		t.Setenv("XDG_RUNTIME_DIR", m.Runtime)
		t.Setenv("PATH", fakesystemd.Bin(t, t.TempDir(), exe)+string(os.PathListSeparator)+os.Getenv("PATH"))
		o, err := Open(ModeSystemd, name(), Options{Reaper: testReaper})
		testutil.NoErr(t, err)
		st, ok := o.Tree.(*scopeTree)
		if !ok {
			t.Fatalf("Open(%q) = %T, want *scopeTree", ModeSystemd, o.Tree)
		}
		return st, m
	}
	return contractMode{
		name: ModeSystemd,
		open: func(t *testing.T) (Tree, []string) {
			st, _ := open(t)
			return st, nil
		},
		start: func(t *testing.T, mode string, extra ...string) (*tree, []string) {
			st, m := open(t)
			tr := startTreeIn(t, st, mode, extra...)
			if err := st.Err(); err != nil {
				t.Fatalf("leader not in a scope: %v", err)
			}
			asked := m.Asked()
			if scope := filepath.Join(m.Apps, st.unit); len(asked) != 1 || asked[0].PID != tr.leader || st.Dir() != scope {
				t.Fatalf("scopes asked for %+v, tree's cgroup %q; want one, for leader %d, adopted as %s", asked, st.Dir(), tr.leader, scope)
			}
			return tr, []string{st.Dir()}
		},
		killed: emptied,
	}
}

// TestTreeContract runs what every Tree promises against every mode this
// host can set up (systemd's scope with a fake systemd, see systemdMode):
// Pids lists every member, Kill kills the whole tree (setsid'd daemons,
// forkers, stopped and multi-threaded processes included) and counts at
// least what Pids saw, the tree is empty after it and a second Kill finds
// nothing, Kill with an ended context still kills, a leader's orphans are
// killed after the leader exited, and Close is idempotent, removes what the
// mode made and ends the tree's use.
func TestTreeContract(t *testing.T) {
	kills := []struct {
		name   string
		mode   string
		extra  []string
		ready  int                          // processes reported before Kill
		before func(t *testing.T, tr *tree) // after ready, before Kill
	}{
		{name: "plain child", mode: "sleep", ready: 1},
		{name: "child ignoring SIGTERM", mode: "ignore-term", ready: 1},
		{name: "setsid double-forked daemon ignoring SIGTERM", mode: "daemon", ready: 3, before: daemonEscaped},
		{name: "forks a child every 10ms", mode: "forker", ready: 6},
		{name: "SIGSTOPped leader", mode: "sleep", ready: 1, before: stopLeader},
		{name: "64 threads", mode: "threads", ready: 1},
		{name: "tree of 20 processes", mode: "tree", extra: []string{envNode + "=0", envNodes + "=20"}, ready: 20},
	}
	for _, m := range contractModes() {
		t.Run(m.name, func(t *testing.T) {
			for _, tc := range kills {
				t.Run("kill/"+tc.name, func(t *testing.T) {
					tr, dirs := m.start(t, tc.mode, tc.extra...)
					ids := waitReported(t, tr.pidfile, tc.ready)
					if tc.before != nil {
						tc.before(t, tr)
					}
					killChecked(t, tr, ids)
					m.killed(t, dirs)
					if es := tr.exitStatus(t); es.String() != "signal SIGKILL" || es.Code() != 137 || es.Pid != tr.leader {
						t.Errorf("leader exit = %d %q code %d, want %d \"signal SIGKILL\" 137", es.Pid, es, es.Code(), tr.leader)
					}
					all := readPidfile(t, tr.pidfile) // the forker reported more while dying
					if alive := aliveIDs(t, all); len(alive) > 0 {
						t.Errorf("alive after Kill: %v (of %d ever in the tree)", alive, len(all))
					}
					if pids, err := tr.Pids(); err != nil || len(pids) != 0 {
						t.Errorf("Pids after Kill = %v, %v; want none", pids, err)
					}
					if n, err := tr.Kill(context.Background()); n != 0 || err != nil {
						t.Errorf("second Kill = %d, %v; want 0, nil", n, err)
					}
					testutil.WaitNoZombies(t)
					closeChecked(t, tr, dirs)
				})
			}
			t.Run("kill with an ended context", func(t *testing.T) {
				tr, dirs := m.start(t, "tree", envNode+"=0", envNodes+"=7")
				ids := waitReported(t, tr.pidfile, 7)
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				if _, err := tr.Kill(ctx); err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("Kill with an ended ctx = %v, want nil or wrapping context.Canceled", err)
				}
				if es := tr.exitStatus(t); es.Code() != 137 {
					t.Errorf("leader exit = %q, want signal SIGKILL", es)
				}
				ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel2()
				if _, err := tr.Kill(ctx2); err != nil {
					t.Fatal(err)
				}
				m.killed(t, dirs)
				if alive := aliveIDs(t, ids); len(alive) > 0 {
					t.Errorf("alive after Kill: %v", alive)
				}
				testutil.WaitNoZombies(t)
			})
			t.Run("kill after the leader exited", func(t *testing.T) {
				tr, dirs := m.start(t, "exit3-orphan")
				ids := waitReported(t, tr.pidfile, 2)
				if es := tr.exitStatus(t); es.String() != "exit code 3" || es.Code() != 3 {
					t.Errorf("leader exit = %q code %d, want \"exit code 3\" 3", es, es.Code())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if n, err := tr.Kill(ctx); n != 1 || err != nil {
					t.Errorf("Kill = %d, %v; want 1 (the setsid'd orphan), nil", n, err)
				}
				if n, err := tr.Kill(context.Background()); n != 0 || err != nil {
					t.Errorf("second Kill = %d, %v; want 0, nil", n, err)
				}
				m.killed(t, dirs)
				if alive := aliveIDs(t, ids); len(alive) > 0 {
					t.Errorf("alive after Kill: %v", alive)
				}
				testutil.WaitNoZombies(t)
				closeChecked(t, tr, dirs)
			})
			t.Run("unstarted", func(t *testing.T) {
				tr, dirs := m.open(t)
				t.Cleanup(func() { tr.Close() })
				if tr.Mode() != strings.Split(m.name, "/")[0] {
					t.Errorf("Mode = %q", tr.Mode())
				}
				if n, err := tr.Kill(context.Background()); n != 0 || err != nil {
					t.Errorf("Kill before Started = %d, %v; want 0, nil", n, err)
				}
				if pids, err := tr.Pids(); len(pids) != 0 || err != nil {
					t.Errorf("Pids before Started = %v, %v", pids, err)
				}
				closeChecked(t, tr, dirs)
			})
		})
	}
}

// closeChecked closes tr twice (the second is a no-op), checks that the
// directories its mode made are gone, and that the tree is closed for use.
func closeChecked(t *testing.T, tr Tree, dirs []string) {
	t.Helper()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup dir %s after Close: %v", d, err)
		}
	}
	if _, err := tr.Kill(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Kill after Close = %v, want ErrClosed", err)
	}
	if _, err := tr.Pids(); !errors.Is(err, ErrClosed) {
		t.Errorf("Pids after Close = %v, want ErrClosed", err)
	}
	if err := tr.Configure(&syscall.SysProcAttr{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Configure after Close = %v, want ErrClosed", err)
	}
}
