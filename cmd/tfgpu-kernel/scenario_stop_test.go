//go:build linux

package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// `tfgpu-kernel stop --all` on a kernel whose supervisor is SIGSTOPped: the
// supervisor is continued and asked to stop, so it stops its kernel itself
// (Jupyter sees the kernel end, not a stopped supervisor it takes for
// alive); the kernel and a setsid'd process it started are dead, the state
// file and the cgroup gone, and the supervisor has exited.
func TestE2EStopHungSupervisor(t *testing.T) {
	s := e2eSetup(t)
	path := writeTCPConn(t, t.TempDir(), "e2e-stop", "5f1c7a0e-stop")
	stateDir, tag, xdg := testutil.PrivateDir(t), e2eTag(t), e2eXDG(t)
	env := append(append([]string{}, s.env...), "E2E_TAG="+tag, "XDG_RUNTIME_DIR="+xdg, "TFGPU_STATE_DIR="+stateDir)

	sup := exec.Command(s.bin, "run", "-f", path, "--", s.python, "-m", "ipykernel_launcher", "-f", path)
	sup.Env = env
	supErr := &testutil.Buffer{}
	sup.Stderr = supErr
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	testutil.NoErr(t, sup.Start())
	var escapee int
	var done chan error // the supervisor's Wait, once the test waits for it
	defer func() {
		sup.Process.Signal(syscall.SIGCONT)
		sup.Process.Kill()
		if done != nil {
			<-done
		} else {
			sup.Wait()
		}
		s.checkSurvivors(t, tag, []int{escapee}, time.Now())
	}()

	// A client has the kernel start a setsid'd process that ignores SIGTERM.
	client := `import sys
from jupyter_client import BlockingKernelClient
kc = BlockingKernelClient(); kc.load_connection_file(sys.argv[1]); kc.start_channels(); kc.wait_for_ready(timeout=60)
kc.execute_interactive("import subprocess, signal; p = subprocess.Popen(['setsid', 'sh', '-c', 'trap \"\" TERM; sleep 300'], preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)); print(p.pid)", timeout=60)
`
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := exec.CommandContext(ctx, s.python, "-c", client, path)
	cl.Env = env
	var clErr strings.Builder
	cl.Stderr = &clErr
	out, err := cl.Output()
	if err != nil {
		t.Fatalf("client: %v\n%s\n%s\nsupervisor:\n%s", err, out, clErr.String(), supErr.String())
	}
	if escapee, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil || !e2eLive(escapee) {
		t.Fatalf("escapee %q not running", out)
	}
	stateFiles, _ := filepath.Glob(filepath.Join(stateDir, "*.json"))
	if len(stateFiles) != 1 {
		t.Fatalf("state files %v, want one", stateFiles)
	}
	var st struct {
		KernelPID int    `json:"kernel_pid"`
		Cgroup    string `json:"cgroup"`
	}
	if b, err := os.ReadFile(stateFiles[0]); err != nil || json.Unmarshal(b, &st) != nil || st.KernelPID <= 1 {
		t.Fatalf("state file %s: %s, %v", stateFiles[0], b, err)
	}

	sup.Process.Signal(syscall.SIGSTOP)
	stop := exec.Command(s.bin, "stop", "--all")
	stop.Env = env
	msg, err := stop.CombinedOutput()
	t.Logf("tfgpu-kernel stop --all: %s", strings.TrimSpace(string(msg)))
	if err != nil {
		t.Fatalf("stop: %v: %s", err, msg)
	}
	if !strings.Contains(string(msg), "stopped kernel root:e2e-stop") || !strings.Contains(string(msg), "supervisor was stopped (SIGSTOP): continued and asked to stop") {
		t.Fatalf("stop said %q", msg)
	}
	for _, pid := range []int{st.KernelPID, escapee} {
		if e2eLive(pid) {
			t.Fatalf("process %d alive after stop", pid)
		}
	}
	if st.Cgroup != "" {
		if _, err := os.Stat(st.Cgroup); !os.IsNotExist(err) {
			t.Fatalf("cgroup %s left: %v", st.Cgroup, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(stateDir, "*.json")); len(left) > 0 {
		t.Fatalf("state files left: %v", left)
	}
	done = make(chan error, 1)
	go func() { done <- sup.Wait() }()
	select {
	case err := <-done:
		done <- err // for the deferred clean-up
		t.Logf("supervisor ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("supervisor still running 10 s after stop; log:\n%s", supErr.String())
	}
}

// writeTCPConn writes dir/kernel-ID.json, a connection file on free
// loopback ports with key, and returns its path.
func writeTCPConn(t *testing.T, dir, id, key string) string {
	t.Helper()
	c := map[string]any{"ip": "127.0.0.1", "key": key, "transport": "tcp", "signature_scheme": "hmac-sha256"}
	// All five listeners stay open until each has its port: closed one
	// by one, the kernel may hand the same free port out twice.
	for _, name := range []string{"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		testutil.NoErr(t, err)
		defer l.Close()
		c[name] = l.Addr().(*net.TCPAddr).Port
	}
	b, _ := json.Marshal(c)
	path := filepath.Join(dir, "kernel-"+id+".json")
	testutil.NoErr(t, os.WriteFile(path, b, 0o600))
	return path
}
