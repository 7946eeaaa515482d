package wrapper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// churnClient is the real jupyter_client making a client per run, as
// nbclient, papermill and browser reconnects do: connect all five
// channels, ask kernel_info, disconnect; argv[2] times.
const churnClient = `
import os, sys, time, zmq.asyncio
from jupyter_client.blocking import BlockingKernelClient
ctx = zmq.asyncio.Context()
for i in range(int(sys.argv[2])):
    c = BlockingKernelClient(connection_file=sys.argv[1], context=ctx)
    c.load_connection_file()
    c.start_channels()
    msg_id = c.kernel_info()
    while True:
        m = c.get_shell_msg(timeout=10)
        if m["parent_header"].get("msg_id") == msg_id:
            break
    # jupyter_client 7.4.9's HBChannel sets _running in its own thread;
    # stopped before that, it spins creating REQ sockets for ever.
    t = time.monotonic()
    while not c.hb_channel._running and time.monotonic() - t < 5:
        time.sleep(0.001)
    c.stop_channels()
ctx.destroy(linger=0)
print("done", flush=True)
os._exit(0)  # not the interpreter's teardown: jupyter_client 7.4.9's __del__ hooks fail there
`

// Client connect/disconnect cycles leave the supervisor's goroutines,
// descriptors and heap where they were (the E2E churn test checks the
// supervisor process's descriptors and RSS from outside; goroutines can
// only be counted in-process).
func TestClientChurnLeavesNothingBehind(t *testing.T) {
	testutil.Integration(t) // a real jupyter_client
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import jupyter_client, zmq").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("need %s with jupyter_client (apt-get install python3-jupyter-client): %s", py, out)
		testutil.RequireOrSkip(t, "%s", msg)
	}
	cycles := 1000
	if testing.Short() {
		cycles = 100
	}
	h := startHarness(t)
	script := filepath.Join(t.TempDir(), "churn.py")
	testutil.NoErr(t, os.WriteFile(script, []byte(churnClient), 0o600))
	run := func(n int) {
		t.Helper()
		cmd := exec.Command(py, script, h.path, fmt.Sprint(n))
		cmd.Env = append(os.Environ(), "PYTHONNOUSERSITE=1")
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		// The supervisor under test runs in this process, and its Reaper
		// reaps every child that exits (the process's only caller of
		// wait4, cgroup's contract): it may take the client's status
		// before os/exec does. The output is whole either way (Wait
		// still waits for the pipes); the client's verdict is its "done".
		if errors.Is(err, syscall.ECHILD) {
			err = nil
		}
		if err != nil || !strings.Contains(string(out), "done") {
			t.Fatalf("churn client: %v\n%s", err, out)
		}
	}
	// measure takes the figures once settled holds of them (the clients'
	// closes seen, their readers ended), or, past a bound only a leak
	// reaches, as they are.
	measure := func(settled func(goroutines, fds int) bool) (goroutines, fds int, heap uint64) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			ents, _ := os.ReadDir("/proc/self/fd")
			goroutines, fds = runtime.NumGoroutine(), len(ents)
			if settled(goroutines, fds) || time.Now().After(deadline) {
				break
			}
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return goroutines, fds, ms.HeapInuse
	}
	run(20) // warm-up: pools, buffers, the first connections' goroutines
	// The baseline: the warm-up's goroutines and descriptors gone, that
	// is the same figures twice, 100 ms apart.
	lastG, lastF := -1, -1
	g0, f0, m0 := measure(func(g, f int) bool {
		same := g == lastG && f == lastF
		lastG, lastF = g, f
		if !same {
			time.Sleep(100 * time.Millisecond)
		}
		return same
	})
	start := time.Now()
	run(cycles)
	took := time.Since(start)
	g1, f1, m1 := measure(func(g, f int) bool { return g <= g0+3 && f <= f0+3 })
	t.Logf("%d cycles in %v: goroutines %d → %d, descriptors %d → %d, heap in use %.1f → %.1f MiB",
		cycles, took.Round(time.Millisecond), g0, g1, f0, f1, float64(m0)/(1<<20), float64(m1)/(1<<20))
	if g1 > g0+3 || f1 > f0+3 || m1 > m0+8<<20 {
		t.Fatalf("%d client cycles left goroutines %d → %d, descriptors %d → %d, heap %d → %d",
			cycles, g0, g1, f0, f1, m0, m1)
	}
	h.send(h.shell, "kernel_info_request", nil, map[string]any{})
	if typ, _ := h.reply(h.shell, 5*time.Second); typ != "kernel_info_reply" {
		t.Fatalf("the harness client no longer gets answers: %s", typ)
	}
}
