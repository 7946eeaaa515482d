//go:build linux && e2e

// TestE2EHub: the supervisor under JupyterHub with batchspawner's
// SlurmSpawner (issue 36, item 1), on TestE2ESlurm's one-node cluster
// (proctrack/cgroup, task/cgroup; newSlurmHost, newCluster), as two real
// users made with useradd: the hub (testdata/stacks/hub.txt: JupyterHub
// 4.1.6, batchspawner 1.3.0, jupyterhub-idle-culler 1.4.0) and
// configurable-http-proxy (testdata/hub/package-lock.json: 4.6.3, npm ci
// into testdata/hub/node_modules, once) run as root with
// testdata/hub/jupyterhub_config.py; each user's single-user server
// (jupyter_server 2.21, ipykernel 7.4, from the same venv, built from
// Debian's /usr/bin/python3 in a world-readable cache) runs as a Slurm job
// as that user, with the tfgpu kernelspec installed in a shared prefix.
//
// testdata/e2e/hub.py drives it over the hub's REST API and each server's
// REST API and kernel websocket through the proxy; its docstring says
// what each stage checks. The stages, run in order in one hub:
//
//	a  spawn, a tfgpu kernel's escaping children, restart through the
//	   server, the hub stops the server: nothing left
//	b  the second user, a stock kernel beside a tfgpu one: the stock
//	   kernel's leftovers noted, never asserted
//	c  the server's kernel culler culls an idle tfgpu kernel, then
//	   jupyterhub-idle-culler (the hub's idle-culler service) both
//	   servers: nothing left
//	d  root's ps lists the user's kernel in its job; root's stop
//	   --idle-for and stop USER:ID park it; the hub's stop: nothing left
//
// After the driver, the hub is stopped and nothing of any job may be left
// (processes carrying the jobs' tag, Slurm job cgroups, tfgpu-* cgroups).
//
//	CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go test -tags e2e -run TestE2EHub -v -count=1 ./cmd/tfgpu-kernel/
//
// Needs what TestE2ESlurm needs, and PyPI and npm the first time.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
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

// hubStages are hub.py's stages this test runs.
var hubStages = []string{"a", "b", "c", "d"}

// hubKernelCull is the single-user servers' cull_idle_timeout, seconds: an
// idle kernel with no client connected is shut down after it (stage c
// waits for that).
const hubKernelCull = "30"

func TestE2EHub(t *testing.T) {
	began := time.Now()
	s := e2eSetup(t)
	h := newSlurmHost(t, s)
	py := hubPython(t)
	chp := hubProxy(t)
	cl := h.newCluster(t, slurmConfs[0]) // proctrack/cgroup, task/cgroup: what clusters run
	// The users' sbatch, squeue and scancel read slurm.conf and talk to
	// munged's socket: both in the test's temporary directories, root's
	// alone as t.TempDir makes them.
	for _, d := range []string{h.dir, cl.dir} {
		for p := d; strings.HasPrefix(p, os.TempDir()+"/"); p = filepath.Dir(p) {
			testutil.NoErr(t, os.Chmod(p, 0o755))
		}
	}

	// What the users' jobs run: the binary and the kernelspec in a prefix
	// every user reads.
	shared := sharedDir(t)
	bin := filepath.Join(shared, "tfgpu-kernel")
	if b, err := os.ReadFile(s.bin); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy %s: %v", s.bin, err)
	}
	prefix := filepath.Join(shared, "prefix")
	if out, err := exec.Command(bin, "install", "--prefix", prefix, "--python", py).CombinedOutput(); err != nil {
		t.Fatalf("%s install --prefix %s --python %s: %v\n%s", bin, prefix, py, err, out)
	}
	if out, err := exec.Command("chmod", "-R", "a+rX", prefix).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v\n%s", err, out)
	}
	users := []localUser{newLocalUser(t, "hub"), newLocalUser(t, "hub")}

	hb := startHub(t, cl, py, chp, prefix, users)
	gs := *s
	gs.python = py
	gs.env = append(append([]string{}, s.env...), "E2E_HUB_URL="+hb.url, "E2E_HUB_DRIVER_TOKEN="+hb.driver,
		"E2E_HUB_CULLER_TOKEN="+hb.culler, "E2E_HUB_API_URL="+hb.api, "E2E_TFGPU_BIN="+bin,
		"E2E_HUB_USERS="+users[0].name+","+users[1].name, "SLURM_CONF="+cl.conf, "E2E_HUB_KERNEL_CULL="+hubKernelCull,
		"PATH="+filepath.Dir(py)+":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
	defer func() {
		if t.Failed() {
			t.Logf("the hub's log:\n%s", e2eTail(hb.log.String(), 6000))
			for _, u := range users {
				logs, _ := filepath.Glob(filepath.Join(u.home, "jupyterhub_slurmspawner_*.log"))
				for _, l := range logs {
					data, _ := os.ReadFile(l)
					t.Logf("---- %s ----\n%s", l, e2eTail(string(data), 4000))
				}
			}
			t.Logf("%s", cl.daemonLogs())
		}
	}()
	res := gs.scenario(t, 10*time.Minute, "hub.py", hubStages...)
	for _, j := range res.Facts["jobs"].([]any) {
		cl.jobs = append(cl.jobs, j.(string))
	}
	for _, k := range res.Facts["kernel_ids"].([]any) {
		cl.kernelIDs = append(cl.kernelIDs, k.(string))
	}
	hb.stop(t)
	cl.checkNothingLeft(t)
	t.Logf("TestE2EHub: stages %s in %v", strings.Join(hubStages, ","), time.Since(began).Round(100*time.Millisecond))
}

// hubPython is the venv of testdata/stacks/hub.txt, built once from
// Debian's Python in a cache every user reads (the jobs run it as the
// users), and its python.
func hubPython(t *testing.T) string {
	t.Helper()
	py, err := stackVenv("hub.txt", "/var/cache/tfgpu-kernel-tests", "venv-hub-", "/usr/bin/python3", 0o755, "-r")
	if err != nil {
		testutil.RequireOrSkip(t, "TestE2EHub's venv (testdata/stacks/hub.txt, from PyPI): %v", err)
	}
	return py
}

// hubProxy is configurable-http-proxy as testdata/hub/package-lock.json
// pins it, installed with npm ci the first time.
func hubProxy(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "hub"))
	testutil.NoErr(t, err)
	chp := filepath.Join(dir, "node_modules", ".bin", "configurable-http-proxy")
	if _, err := os.Stat(chp); err != nil {
		npm := exec.Command("npm", "ci", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error")
		if out, err := npm.CombinedOutput(); err != nil {
			testutil.RequireOrSkip(t, "need configurable-http-proxy: npm ci --prefix cmd/tfgpu-kernel/testdata/hub: %v\n%s", err, out)
		}
	}
	return chp
}

// hubRun is the running hub.
type hubRun struct {
	cmd            *exec.Cmd
	r              *slurmReaper
	tag            string // E2E_HUB_DAEMON of the hub and the proxy it starts
	url, api       string // the proxy's and the hub API's
	driver, culler string // the services' tokens
	log            *testutil.Buffer
	stopped        bool
}

func hubToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startHub runs jupyterhub with testdata/hub/jupyterhub_config.py as root
// in a directory of its own and waits until its API answers through the
// proxy.
func startHub(t *testing.T, cl *slurmCluster, py, chp, prefix string, users []localUser) *hubRun {
	t.Helper()
	dir := t.TempDir()
	ports := slurmFreePorts(t, 3)
	hb := &hubRun{r: cl.h.r, tag: cl.tag, url: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		api: fmt.Sprintf("http://127.0.0.1:%d/hub/api", ports[1]), driver: hubToken(), culler: hubToken(), log: &testutil.Buffer{}}
	conf, err := filepath.Abs(filepath.Join("testdata", "hub", "jupyterhub_config.py"))
	testutil.NoErr(t, err)
	venvBin := filepath.Dir(py)
	env := append(e2eCleanEnv(), "E2E_HUB_DAEMON="+hb.tag, "SLURM_CONF="+cl.conf,
		"PATH="+venvBin+":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		"E2E_HUB_DIR="+dir, "E2E_HUB_PORT="+strconv.Itoa(ports[0]), "E2E_HUB_API_PORT="+strconv.Itoa(ports[1]),
		"E2E_HUB_PROXY_API_PORT="+strconv.Itoa(ports[2]), "E2E_HUB_CHP="+chp, "E2E_HUB_PASSWORD="+hubToken(),
		"E2E_HUB_VENV_BIN="+venvBin, "E2E_HUB_JUPYTER_PATH="+filepath.Join(prefix, "share", "jupyter"),
		"E2E_HUB_JOB_TAG="+cl.tag, "E2E_HUB_KERNEL_CULL="+hubKernelCull,
		"E2E_HUB_DRIVER_TOKEN="+hb.driver, "E2E_HUB_CULLER_TOKEN="+hb.culler, "E2E_HUB_DEBUG=1")
	hb.cmd = exec.Command(filepath.Join(venvBin, "jupyterhub"), "-f", conf)
	hb.cmd.Env, hb.cmd.Dir, hb.cmd.Stdout, hb.cmd.Stderr = env, dir, hb.log, hb.log
	if err := hb.r.start(hb.cmd); err != nil {
		t.Fatalf("start jupyterhub: %v", err)
	}
	t.Cleanup(func() { hb.stop(t) })
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(hb.url + "/hub/api/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) || slurmExited(hb.cmd) {
			t.Fatalf("the hub did not answer %s/hub/api/ within 90 s (%v):\n%s", hb.url, err, e2eTail(hb.log.String(), 6000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("hub up at %s (API %s), users %s and %s", hb.url, hb.api, users[0].name, users[1].name)
	return hb
}

// stop ends the hub with SIGTERM (it stops what servers still run and its
// proxy), SIGKILL after 60 s, then kills by pid whatever carries its tag
// (the proxy, if the hub left it).
func (hb *hubRun) stop(t *testing.T) {
	if hb.stopped {
		return
	}
	hb.stopped = true
	if hb.cmd.ProcessState == nil {
		hb.cmd.Process.Signal(syscall.SIGTERM)
	}
	done := make(chan error, 1)
	go func() { done <- hb.r.wait(hb.cmd) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Errorf("jupyterhub (pid %d) did not exit 60 s after SIGTERM: SIGKILL", hb.cmd.Process.Pid)
		hb.cmd.Process.Kill()
		<-done
	}
	for round := 0; round < 50; round++ {
		left := slurmTagged("E2E_HUB_DAEMON="+hb.tag, hb.r.ownPids())
		if len(left) == 0 {
			return
		}
		if round == 0 {
			t.Logf("the hub left (killed now):\n  %s", strings.Join(e2eDescribe(left), "\n  "))
		}
		for _, p := range left {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
