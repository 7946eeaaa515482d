package wrapper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// `tfgpu-kernel stop` on a kernel whose supervisor is SIGSTOPped: its state
// file leads to its cgroup, which is killed empty and removed.
func TestFinishAKernelWhoseSupervisorIsStopped(t *testing.T) {
	for _, mode := range []string{cgroup.ModeV2, cgroup.ModeV1, cgroup.ModeProc} {
		t.Run(mode, func(t *testing.T) {
			_, cmd, pid, st := startExternalIn(t, mode)
			if want := map[string]string{cgroup.ModeV2: "v2", cgroup.ModeV1: "v1", cgroup.ModeProc: "proc"}[mode]; st.Containment != want {
				t.Fatalf("containment %q, want %q", st.Containment, want)
			}
			if st.SupervisorPID != cmd.Process.Pid || !st.SupervisorAlive() || st.KernelPID <= 1 || st.Containment == "" {
				t.Fatalf("state %+v does not describe the running supervisor %d", st, cmd.Process.Pid)
			}
			if fi, err := os.Stat(filepath.Join(os.Getenv("TFGPU_STATE_DIR"), st.KernelID+".json")); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("state file mode %v, %v; want 0600", fi.Mode(), err)
			}
			cmd.Process.Signal(syscall.SIGSTOP)
			t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT) })
			testutil.WaitFor(t, 20*time.Second, "the supervisor to be stopped", st.SupervisorStopped)
			d, err := record.OpenDir(os.Getenv("TFGPU_STATE_DIR"), false, true)
			testutil.NoErr(t, err)
			defer d.Close()
			n, err := d.Finish(st, 5*time.Second)
			testutil.NoErr(t, err)
			// Proc mode: Finish sends SIGKILL, which is delivered
			// asynchronously; the kernel's death is the event.
			testutil.WaitFor(t, 20*time.Second, "the kernel to die after Finish", func() bool { return !pidAlive(st.KernelPID) })
			if mode != cgroup.ModeProc {
				if pidAlive(pid) {
					t.Fatalf("escapee %d alive after Finish", pid)
				}
				if _, err := os.Stat(st.Cgroup); !os.IsNotExist(err) {
					t.Fatalf("cgroup %s not removed: %v", st.Cgroup, err)
				}
				if n < 2 {
					t.Fatalf("Finish killed %d processes, want kernel and escapee", n)
				}
			}
			if mode == cgroup.ModeV1 {
				if left, _ := filepath.Glob("/sys/fs/cgroup/*/tfgpu-" + st.KernelID + "*"); len(left) > 0 {
					t.Fatalf("v1 cgroups left: %v", left)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(os.Getenv("TFGPU_STATE_DIR"), "*.json")); len(left) > 0 {
				t.Fatalf("state files left: %v", left)
			}
		})
	}
}

// 100 start/stop cycles of a kernel with a setsid'd escapee leave no
// process, no cgroup and no state file behind.
func TestStartStopCyclesLeaveNothing(t *testing.T) {
	parent := requireCgroupV2(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "escapees")
	t.Setenv("TFGPU_FAKE_KERNEL", "1")
	t.Setenv("TFGPU_FAKE_SPAWN_FILE", pidFile)
	path, _ := writeConn(t, dir)
	stateDir := testutil.PrivateDir(t)
	n := 100
	if testing.Short() {
		n = 10
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- Run(ctx, Config{ConnFile: path, Argv: []string{os.Args[0], "-test.run=^$", "-f", path},
				StateDir: stateDir, Log: discardLogger(), Stderr: io.Discard})
		}()
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("cycle %d's escapee", i), func() bool {
			b, _ := os.ReadFile(pidFile)
			return strings.Count(string(b), "\n") == i+1
		})
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("cycle %d: exit %d", i, code)
		}
	}
	b, _ := os.ReadFile(pidFile)
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		if pidAlive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("escapee %d survived its cycle", pid)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(parent, "tfgpu-"+testKernelID+"-*")); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(stateDir, "*")); len(left) > 0 {
		t.Errorf("state files left: %v", left)
	}
	t.Logf("%d cycles in %v", n, time.Since(start).Round(time.Millisecond))
}

// startExternalIn starts an external supervisor in containment mode, has
// its kernel spawn a setsid'd escapee, and returns them with the kernel's
// record.
func startExternalIn(t *testing.T, mode string) (*harness, *exec.Cmd, int, record.State) {
	t.Helper()
	switch mode {
	case cgroup.ModeV2:
		requireCgroupV2(t)
	case cgroup.ModeV1:
		requireFreezer(t)
	}
	t.Setenv("TFGPU_CGROUP", mode)
	h, cmd := startExternal(t, "")
	pid := h.spawnEscapee()
	states, _, err := record.ReadStates(os.Getenv("TFGPU_STATE_DIR"))
	if err != nil || len(states) != 1 {
		t.Fatalf("states %+v, %v; want the one kernel", states, err)
	}
	return h, cmd, pid, states[0]
}

// A supervisor that cannot read its own start time writes no record: one
// with a wrong start time would make the next supervisor take it for dead
// and finish its running kernel.
func TestNoRecordWithoutTheSupervisorsStartTime(t *testing.T) {
	d, err := record.OpenDir(testutil.PrivateDir(t), true, false)
	testutil.NoErr(t, err)
	defer d.Close()
	var log testutil.Buffer
	s := &supervisor{id: "k-start", dir: d, tree: cgroup.NewProcTree(os.Getpid()),
		log: slog.New(slog.NewTextHandler(&log, nil))}
	startTime = func(int) (uint64, error) { return 0, errors.New("no /proc") }
	s.record()
	startTime = proc.StartTime
	if states, _, _ := d.States(); len(states) != 0 {
		t.Fatalf("recorded %+v without the start time", states)
	}
	if !strings.Contains(log.String(), "will not find it") {
		t.Fatalf("not said: %s", log.String())
	}
	s.record()
	if states, _, _ := d.States(); len(states) != 1 || states[0].SupervisorStart == 0 || !states[0].SupervisorAlive() {
		t.Fatalf("recorded %+v", states)
	}
}
