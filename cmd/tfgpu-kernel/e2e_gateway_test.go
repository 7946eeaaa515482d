//go:build linux && e2e

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// TestE2EGateway (issue 36 item 1): Jupyter Enterprise Gateway 3.3.0
// (testdata/stacks/gateway.txt, a venv of its own: it pins
// jupyter_client 6 and jupyter_server 1) launches kernels with its
// LocalProcessProxy, and JupyterLab 4 (the current stack) runs with
// --gateway-url pointing at it. testdata/e2e/gateway.py plays the browser
// against the Lab server's REST API and kernel websocket: start, a cell
// that starts a setsid'd double-forked daemon, interrupt, restart, the
// first cell after it, shutdown, three rounds each (the steps: its
// docstring). The kernelspecs are in the gateway's JUPYTER_PATH only: the
// one `tfgpu-kernel install --prefix` writes, unchanged (no
// metadata.process_proxy: the gateway's default is the LocalProcessProxy,
// checked in its log), and the stock one `ipykernel install` writes, both
// running the current stack's Python.
//
// On tfgpu the escaped daemon must be gone after the restart and after the
// shutdown, the interrupt must end the cell with KeyboardInterrupt, the
// kernel answer after the restart, and nothing of the kernel (processes,
// records, `ps --json` rows) be left after the shutdown and after the test.
// On stock whether the daemon survives is logged: the comparison. The
// figures of both are logged side by side, medians of the rounds.
//
// Everything the gateway and Lab start carries this test's E2E_TAG (the
// gateway passes it on through EG_INHERITED_ENVS): once both servers are
// stopped, nothing tagged may be alive.
func TestE2EGateway(t *testing.T) {
	s := e2eSetupStack(t, stackCurrent, "jupyterlab", "websocket")
	gw := gatewayPython(t)
	dir := t.TempDir()

	// The kernelspecs, where only the gateway looks.
	prefix := filepath.Join(dir, "gateway-kernels")
	testutil.NoErr(t, e2eInstallSpec(s.bin, prefix, s.python))
	stock := exec.Command(s.python, "-m", "ipykernel", "install", "--prefix", prefix, "--name", "python3",
		"--display-name", "Python 3 (stock ipykernel)")
	// TMPDIR: ipykernel's install leaves the empty directory it staged
	// the spec in (kernelspec/python.go); here it goes with the test.
	stock.Env = append(slices.Clone(s.env), "TMPDIR="+t.TempDir())
	if out, err := stock.CombinedOutput(); err != nil {
		t.Fatalf("ipykernel install --prefix %s: %v\n%s", prefix, err, out)
	}

	tag, state, xdg := e2eTag(t), filepath.Join(dir, "state"), e2eXDG(t)
	// Last of the cleanups: whatever a failure left of the servers' kernels
	// (a gateway SIGKILLed stops none), found by the tag, killed by pid.
	t.Cleanup(func() {
		if left := e2eAlive(tag, nil); len(left) > 0 {
			t.Errorf("killed at cleanup:\n  %s", strings.Join(e2eDescribe(left), "\n  "))
			e2eKill(left)
		}
		e2eReapOrphans()
	})
	env := envWith(s.env, "E2E_TAG="+tag, "TFGPU_STATE_DIR="+state, "XDG_RUNTIME_DIR="+xdg)
	egToken, labToken := randomToken(t), randomToken(t)
	eg := startJupyter(t, "gateway", filepath.Join(dir, "gateway"), "/api",
		envWith(env, "JUPYTER_PATH="+filepath.Join(prefix, "share", "jupyter"),
			// The gateway hands a kernel only KERNEL_* and these of its own
			// environment (no PATH, no HOME).
			"EG_INHERITED_ENVS=E2E_TAG,TFGPU_STATE_DIR,XDG_RUNTIME_DIR"),
		egToken, func(port int) []string {
			return []string{filepath.Join(filepath.Dir(gw), "jupyter-enterprisegateway"),
				"--ip=127.0.0.1", fmt.Sprintf("--port=%d", port), "--port_retries=0",
				"--EnterpriseGatewayApp.auth_token=" + egToken,
				// The gateway refuses kernels to root by default; the test runs as root.
				"--EnterpriseGatewayApp.unauthorized_users=nobody",
				// Lab lists the running kernels (its /api/status and
				// /api/kernels ask the gateway), which the gateway refuses
				// by default (403).
				"--EnterpriseGatewayApp.list_kernels=True"}
		})
	lab := startJupyter(t, "lab", filepath.Join(dir, "lab"), "/api/status",
		envWith(env, "JUPYTER_PATH="+filepath.Join(dir, "lab", "nothing")), labToken,
		func(port int) []string {
			return []string{s.python, "-m", "jupyterlab", "--no-browser", "--allow-root",
				"--ip=127.0.0.1", fmt.Sprintf("--port=%d", port), "--port-retries=0",
				"--IdentityProvider.token=" + labToken, "--ServerApp.root_dir=" + filepath.Join(dir, "lab"),
				"--gateway-url=" + eg.url, "--GatewayClient.auth_token=" + egToken}
		})

	kernels := []struct{ name, spec string }{{"tfgpu", "tfgpu"}, {"stock", "python3"}}
	facts := map[string]map[string]any{}
	for _, k := range kernels {
		t.Run(k.name, func(t *testing.T) {
			gs := *s
			gs.kernel, gs.wrapped = k.spec, k.name == "tfgpu"
			gs.env = envWith(env, "E2E_KERNEL="+k.spec, "E2E_WRAPPED="+map[bool]string{true: "1", false: "0"}[gs.wrapped],
				"E2E_LAB_URL="+lab.url, "E2E_LAB_TOKEN="+labToken, "E2E_TFGPU_BIN="+s.bin)
			res := gs.scenario(t, 300*time.Second, "gateway.py")
			facts[k.name] = res.Facts
		})
	}
	logGatewayFigures(t, facts)

	// After the test: both servers stopped as a user stops them, and
	// nothing of any kernel left.
	lab.stop(t)
	eg.stop(t)
	if n := strings.Count(eg.log(), "Local kernel launched"); n == 0 {
		t.Errorf("the gateway's log has no 'Local kernel launched' (LocalProcessProxy):\n%s", e2eTail(eg.log(), 4000))
	} else {
		t.Logf("the gateway launched %d kernels with its LocalProcessProxy", n)
	}
	// The supervisors' stderr is the gateway's: what each stop took.
	var stops []string
	for _, l := range strings.Split(eg.log(), "\n") {
		if strings.Contains(l, `msg="kernel stopped"`) {
			stops = append(stops, l)
		}
	}
	t.Logf("the supervisors' stops, from the gateway's log:\n  %s", strings.Join(stops, "\n  "))
	gs := *s
	gs.wrapped = true // the driver killed what the stock kernel left
	gs.checkSurvivors(t, tag, nil, time.Now())
	gs.checkLeftovers(t, xdg, false)
	ps := exec.Command(s.bin, "ps", "--json")
	ps.Env = env
	out, err := ps.Output()
	if err != nil || strings.TrimSpace(string(out)) != "[]" {
		t.Errorf("tfgpu-kernel ps --json after the test: %v %s", err, out)
	}
	if ents, _ := os.ReadDir(state); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("left in the state directory after the test: %s", strings.Join(names, " "))
	}
}

// logGatewayFigures logs gateway.py's medians, tfgpu beside stock, and
// whether each kernel's escaped daemon survived.
func logGatewayFigures(t *testing.T, facts map[string]map[string]any) {
	var b strings.Builder
	fmt.Fprintf(&b, "medians through JupyterLab and Enterprise Gateway (%d rounds):\n", gatewayRounds)
	fmt.Fprintf(&b, "  %-34s %8s %8s\n", "seconds", "tfgpu", "stock")
	for _, f := range []string{"start_s", "interrupt_s", "restart_s", "first_cell_after_restart_s", "shutdown_s"} {
		fmt.Fprintf(&b, "  %-34s %8v %8v\n", f, facts["tfgpu"]["median_"+f], facts["stock"]["median_"+f])
	}
	for _, f := range []string{"daemon_survived_restart", "daemon_survived_shutdown"} {
		fmt.Fprintf(&b, "  %-34s %8v %8v\n", f+" (rounds)", facts["tfgpu"][f], facts["stock"][f])
	}
	t.Log(b.String())
}

// gatewayRounds is E2E_ROUNDS, gateway.py's default.
const gatewayRounds = 3

var (
	gatewayOnce sync.Once
	gatewayPy   string
	gatewayErr  error
)

// gatewayPython is the Python of the gateway's venv, built once per
// testdata/stacks/gateway.txt beside the current stack's (fatal in CI where
// it cannot be, a skip elsewhere).
func gatewayPython(t *testing.T) string {
	t.Helper()
	gatewayOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			gatewayErr = err
			return
		}
		base3, err := exec.LookPath("python3")
		if err != nil {
			gatewayErr = fmt.Errorf("no python3 on PATH to build the venv with: %w", err)
			return
		}
		gatewayPy, gatewayErr = stackVenv("gateway.txt", filepath.Join(cache, "tfgpu-kernel"), "venv-gateway-", base3, 0o700, "-r")
	})
	if gatewayErr != nil {
		testutil.RequireOrSkip(t, "Enterprise Gateway's venv: %v", gatewayErr)
	}
	return gatewayPy
}

// envWith is env with each NAME=value of kvs in place of NAME's.
func envWith(env []string, kvs ...string) []string {
	out := make([]string, 0, len(env)+len(kvs))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(kvs, func(n string) bool { return strings.HasPrefix(n, k+"=") }) {
			out = append(out, kv)
		}
	}
	return append(out, kvs...)
}

func randomToken(t *testing.T) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// jupyterServer is a Jupyter server process the test started: the gateway
// or Lab, in a process group of its own, its output in a log file.
type jupyterServer struct {
	name, url, logPath string
	cmd                *exec.Cmd
	done               chan struct{} // closed once cmd.Wait returned
	stopOnce           sync.Once
}

// startJupyter starts argv(port) on a free port with env in dir and waits
// until GET ready (with token) answers 200; another port when the chosen
// one was taken in between. The server is stopped and reaped at cleanup.
func startJupyter(t *testing.T, name, dir, ready string, env []string, token string, argv func(port int) []string) *jupyterServer {
	t.Helper()
	for _, d := range []string{"runtime", "config", "data"} {
		testutil.NoErr(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	env = envWith(env, "JUPYTER_RUNTIME_DIR="+filepath.Join(dir, "runtime"),
		"JUPYTER_CONFIG_DIR="+filepath.Join(dir, "config"), "JUPYTER_DATA_DIR="+filepath.Join(dir, "data"))
	for attempt := 1; attempt <= 3; attempt++ {
		port := freePort(t)
		srv := &jupyterServer{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", port),
			logPath: filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, attempt)), done: make(chan struct{})}
		logf, err := os.Create(srv.logPath)
		testutil.NoErr(t, err)
		a := argv(port)
		srv.cmd = exec.Command(a[0], a[1:]...)
		srv.cmd.Env, srv.cmd.Dir, srv.cmd.Stdout, srv.cmd.Stderr = env, dir, logf, logf
		srv.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := srv.cmd.Start(); err != nil {
			logf.Close()
			t.Fatalf("start %s: %v", name, err)
		}
		logf.Close()
		go func() { _ = srv.cmd.Wait(); close(srv.done) }()
		t.Cleanup(func() { srv.stop(t) })
		t0 := time.Now()
		if srv.waitReady(ready, token, 90*time.Second) {
			t.Logf("%s answered %s after %v: %s", name, ready, time.Since(t0).Round(10*time.Millisecond), srv.url)
			return srv
		}
		srv.stop(t)
		if !strings.Contains(srv.log(), "in use") {
			t.Fatalf("%s did not answer %s (exit %v):\n%s", name, ready, srv.cmd.ProcessState, e2eTail(srv.log(), 4000))
		}
		t.Logf("port %d was taken before %s bound it; again", port, name)
	}
	t.Fatalf("no free port for %s after 3 attempts", name)
	return nil
}

// waitReady polls GET url+path until it answers 200, the server exits or
// within passes (a bound only a failure reaches).
func (s *jupyterServer) waitReady(path, token string, within time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+path, nil)
		req.Header.Set("Authorization", "token "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-s.done:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop SIGTERMs the server (Jupyter's own clean shutdown: it stops its
// kernels), waits e2eSurviveWait for it to exit, then SIGKILLs its process
// group; it is reaped by its Wait either way. Idempotent.
func (s *jupyterServer) stop(t *testing.T) {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM) // ESRCH: it exited already
		select {
		case <-s.done:
		case <-time.After(e2eSurviveWait):
			t.Errorf("%s did not exit within %v of SIGTERM; killed", s.name, e2eSurviveWait)
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	})
}

func (s *jupyterServer) log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// freePort is a port nobody listens on now (the servers run with no port
// retries, so a race for it shows as a start failure, retried).
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testutil.NoErr(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
