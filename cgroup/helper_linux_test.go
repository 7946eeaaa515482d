package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil/fakesystemd"
)

// tortureProcs is how many live processes the "torture" helper tree has
// when it is killed: the leader (16 threads, ignoring SIGTERM), 6 setsid'd
// daemons left by double forks, a SIGSTOPped process, 2 children ignoring
// SIGTERM, and a forker with the sleeps it forked every 10 ms so far (it
// keeps forking while it is killed). The 6 middle processes of the double
// forks report too, and exit.
const tortureProcs = 30

// The test binary plays every process of the trees (os/exec's TestMain
// helper-process pattern): with CGROUP_TEST_HELPER set it runs helper(mode)
// instead of the tests. Each helper appends "pid starttime" to
// CGROUP_TEST_PIDFILE, so that the test knows every process that was ever in
// the tree and can tell it from a later process with the same pid.
const (
	envMode    = "CGROUP_TEST_HELPER"
	envPidfile = "CGROUP_TEST_PIDFILE"
	envNode    = "CGROUP_TEST_NODE"
	envNodes   = "CGROUP_TEST_NODES"
)

// testReaper is the one Reaper of the test process, which is a child subreaper.
var testReaper *proc.Reaper

func TestMain(m *testing.M) {
	// First: systemd-run's process (the systemd contract mode) has the
	// helper's environment it starts.
	fakesystemd.Main()
	if mode := os.Getenv(envMode); mode != "" {
		helper(mode) // never returns
	}
	testutil.CleanEnv() // the host's XDG_RUNTIME_DIR (a systemd user session), TFGPU_ and Slurm variables (docs/testing.md#hermetic)
	if err := proc.SetChildSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testReaper = proc.StartReaper()
	code := m.Run()
	testReaper.Stop()
	os.Exit(code)
}

// helper is the body of a helper process.
func helper(mode string) {
	switch mode {
	case "sleep":
		report(os.Getpid())
	case "ignore-term":
		ignoreTerm()
		report(os.Getpid())
	case "daemon": // leader: start a middle process and wait for it, like a shell running a daemon
		ignoreTerm()
		report(os.Getpid())
		mid := spawnSelf("daemon-mid", nil)
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(mid, &ws, 0, nil); err != nil {
			fail("wait daemon-mid: %v", err)
		}
	case "daemon-mid": // setsid + fork, then exit: the daemon is orphaned
		report(os.Getpid())
		spawnSelf("ignore-term", &syscall.SysProcAttr{Setsid: true})
		os.Exit(0)
	case "exit3-orphan": // leave a setsid'd child behind and exit 3
		report(os.Getpid())
		spawnSelf("ignore-term", &syscall.SysProcAttr{Setsid: true})
		os.Exit(3)
	case "forker": // fork a new child every 10 ms, forever
		report(os.Getpid())
		for {
			pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "1000"}, &syscall.ProcAttr{})
			if err != nil {
				fail("fork sleep: %v", err)
			}
			report(pid)
			time.Sleep(10 * time.Millisecond)
		}
	case "threads": // 64 OS threads
		for range 64 {
			go func() {
				runtime.LockOSThread()
				select {}
			}()
		}
		for threads() < 64 {
			time.Sleep(time.Millisecond)
		}
		report(os.Getpid())
	case "torture": // the E2E torture kernel's composition, see tortureProcs
		ignoreTerm()
		for range 16 {
			go func() {
				runtime.LockOSThread()
				select {}
			}()
		}
		report(os.Getpid())
		for range 6 { // setsid'd double-forked daemons ignoring SIGTERM
			mid := spawnSelf("daemon-mid", &syscall.SysProcAttr{Setsid: true})
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(mid, &ws, 0, nil); err != nil {
				fail("wait daemon-mid: %v", err)
			}
		}
		stopped := spawnSelf("sleep", nil)
		syscall.Kill(stopped, syscall.SIGSTOP)
		spawnSelf("ignore-term", nil)
		spawnSelf("ignore-term", nil)
		spawnSelf("forker", nil)
	case "tree": // node k of a binary tree of n processes starts nodes 2k+1 and 2k+2
		k, _ := strconv.Atoi(os.Getenv(envNode))
		n, _ := strconv.Atoi(os.Getenv(envNodes))
		report(os.Getpid())
		for _, c := range []int{2*k + 1, 2*k + 2} {
			if c < n {
				spawnSelf("tree", nil, envNode+"="+strconv.Itoa(c))
			}
		}
	default:
		fail("unknown helper mode %q", mode)
	}
	for {
		time.Sleep(time.Hour)
	}
}

func ignoreTerm() { signal.Ignore(unix.SIGTERM) }

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "helper %d: "+format+"\n", append([]any{os.Getpid()}, args...)...)
	os.Exit(111)
}

// report appends "pid starttime" of pid to the pidfile; one write with
// O_APPEND, so lines from concurrent helpers do not interleave.
func report(pid int) {
	r := proc.StatReader{Root: "/proc"}
	s, ok, err := r.Read(pid)
	if err != nil || !ok {
		fail("stat %d: %v", pid, err)
	}
	f, err := os.OpenFile(os.Getenv(envPidfile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fail("%v", err)
	}
	if _, err := fmt.Fprintf(f, "%d %d\n", pid, s.Start); err != nil {
		fail("%v", err)
	}
	f.Close()
}

func threads() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// helperEnv is the environment for a helper in mode, with extra variables.
func helperEnv(mode string, extra ...string) []string {
	set := append([]string{envMode + "=" + mode}, extra...)
	var env []string
	for _, kv := range os.Environ() {
		// Drop what set overrides: os.Getenv returns the first of duplicates.
		if !slices.ContainsFunc(set, func(s string) bool {
			k, _, _ := strings.Cut(s, "=")
			return strings.HasPrefix(kv, k+"=")
		}) {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// spawnSelf starts the test binary as a helper from inside a helper (which
// does not use the Reaper) and returns its pid.
func spawnSelf(mode string, sys *syscall.SysProcAttr, extra ...string) int {
	exe, err := os.Executable()
	if err != nil {
		fail("%v", err)
	}
	pid, err := syscall.ForkExec(exe, []string{exe, "-test.run=^$"}, &syscall.ProcAttr{
		Env: helperEnv(mode, extra...), Files: []uintptr{0, 1, 2}, Sys: sys})
	if err != nil {
		fail("spawn %s: %v", mode, err)
	}
	return pid
}

// tree is a started helper tree; its cleanup kills it whatever the test did.
type tree struct {
	Tree
	leader  int
	exited  <-chan proc.ExitStatus
	pidfile string
}

func startTree(t *testing.T, mode string, extra ...string) *tree {
	t.Helper()
	return startTreeIn(t, NewProcTree(os.Getpid(), WithExclude(testReaper.Owns)), mode, extra...)
}

// startTreeIn is startTree in the tree in, which no process was started in:
// where in is a Launcher, the leader is started through its Launch, as the
// supervisor starts a kernel (wrapper's spawn).
func startTreeIn(t *testing.T, in Tree, mode string, extra ...string) *tree {
	t.Helper()
	tr := &tree{Tree: in, pidfile: filepath.Join(t.TempDir(), "pids")}
	tr.spawn(t, nil, false, mode, extra...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := tr.Kill(ctx); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("cleanup: %v", err)
		}
		tr.Close()
	})
	return tr
}

// spawn starts tr's leader, the helper in mode, as Configure prepares it
// (keeping Pdeathsig, setting Setpgid, and UseCgroupFD as *useFD says
// where useFD is not nil), through tr's Launch where tr is a Launcher;
// it calls Started unless noStarted (the test calls it).
func (tr *tree) spawn(t *testing.T, useFD *bool, noStarted bool, mode string, extra ...string) {
	t.Helper()
	exe, err := os.Executable()
	testutil.NoErr(t, err)
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // backstop if the test binary dies
	if err := tr.Configure(sys); err != nil {
		t.Fatal(err)
	}
	if sys.Pdeathsig != syscall.SIGKILL || !sys.Setpgid || useFD != nil && sys.UseCgroupFD != *useFD {
		want := "either"
		if useFD != nil {
			want = strconv.FormatBool(*useFD)
		}
		t.Fatalf("Configure: Pdeathsig=%v Setpgid=%v UseCgroupFD=%v, want SIGKILL, true and %s", sys.Pdeathsig, sys.Setpgid, sys.UseCgroupFD, want)
	}
	attr := &syscall.ProcAttr{Env: helperEnv(mode, append(extra, envPidfile+"="+tr.pidfile)...),
		Files: []uintptr{0, 1, 2}, Sys: sys}
	path, argv := exe, []string{exe, "-test.run=^$"}
	if l, ok := tr.Tree.(Launcher); ok {
		if path, argv, attr.Files, err = l.Launch(path, argv, attr.Files); err != nil {
			t.Fatal(err)
		}
	}
	tr.leader, tr.exited, err = testReaper.StartProcess(path, argv, attr)
	testutil.NoErr(t, err)
	if !noStarted {
		tr.Started(tr.leader)
	}
}

// cleanupCgroups is the cleanup of a tree of a cgroup mode: it kills the
// tree and closes it, kills (as an error) any process of the helpers'
// pidfile that survived, and checks that dirs (a "" is skipped) are gone.
func (tr *tree) cleanupCgroups(t *testing.T, dirs ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := tr.Kill(ctx); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("cleanup: %v", err)
		}
		if err := tr.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		// Backstop: whatever escaped (a bug) must not outlive the test.
		for _, id := range aliveIDs(t, readPidfile(t, tr.pidfile)) {
			t.Errorf("cleanup: process %d survived; killing it", id.pid)
			syscall.Kill(id.pid, syscall.SIGKILL)
		}
		for _, d := range dirs {
			if _, err := os.Stat(d); d != "" && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cgroup %s left after Close: %v", d, err)
			}
		}
	})
}

// exitStatus waits for the leader's exit status.
func (tr *tree) exitStatus(t *testing.T) proc.ExitStatus {
	t.Helper()
	select {
	case es := <-tr.exited:
		return es
	case <-time.After(10 * time.Second):
		t.Fatalf("no exit status for leader %d", tr.leader)
		return proc.ExitStatus{}
	}
}
