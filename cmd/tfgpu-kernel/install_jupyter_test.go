//go:build linux

// Install tests against Debian's real Jupyter stack: every destination
// (--prefix, --user with JUPYTER_DATA_DIR, --sys-prefix of a venv), what
// `jupyter kernelspec list/remove` make of the result, and --wrap of an
// existing kernelspec started for real through jupyter_client.
//
// `jupyter kernelspec` is run as `python -m jupyter_client.kernelspecapp`:
// Debian ships the jupyter-kernelspec script in the separate jupyter-client
// package, and `python3 -m jupyter kernelspec` needs that script.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
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

var updateInstallGolden = flag.Bool("update-install", false, "rewrite testdata/install golden files")

// installEnv is a clean environment whose every Jupyter and Python path
// points into a fresh temp dir (returned), so no test reads or writes the
// real home; JUPYTER_PATH, JUPYTER_DATA_DIR etc. are then added by the test.
func installEnv(t *testing.T, extra ...string) (env []string, tmp string) {
	t.Helper()
	tmp = t.TempDir()
	env = append(e2eCleanEnv(), "HOME="+tmp, "XDG_DATA_HOME=", "IPYTHONDIR="+filepath.Join(tmp, "ipython"),
		"JUPYTER_CONFIG_DIR="+filepath.Join(tmp, "config"), "JUPYTER_RUNTIME_DIR="+filepath.Join(tmp, "runtime"),
		"PYDEVD_DISABLE_FILE_VALIDATION=1", "PYTHONDONTWRITEBYTECODE=1")
	return append(env, extra...), tmp
}

// installSpecList is `jupyter kernelspec list --json` run by py in env.
type installSpecList struct {
	Kernelspecs map[string]struct {
		ResourceDir string `json:"resource_dir"`
		Spec        struct {
			Argv        []string          `json:"argv"`
			DisplayName string            `json:"display_name"`
			Env         map[string]string `json:"env"`
		} `json:"spec"`
	} `json:"kernelspecs"`
}

func installListSpecs(t *testing.T, env []string, py string) installSpecList {
	t.Helper()
	out := installPyOut(t, env, py, "-m", "jupyter_client.kernelspecapp", "list", "--json")
	var l installSpecList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("jupyter kernelspec list --json: %v\n%s", err, out)
	}
	return l
}

func installWriteSpec(t *testing.T, dir, kernelJSON string, files map[string]string) {
	t.Helper()
	testutil.NoErr(t, os.MkdirAll(dir, 0o755))
	files["kernel.json"] = kernelJSON
	for n, b := range files {
		testutil.NoErr(t, os.WriteFile(filepath.Join(dir, n), []byte(b), 0o644))
	}
}

// TestInstallModes installs into each destination, finds the kernelspec with
// `jupyter kernelspec list`, removes it with `jupyter kernelspec remove -f`,
// and checks --uninstall refuses a kernelspec in the same place it did not write.
func TestInstallModes(t *testing.T) {
	testutil.RequireHermetic(t)
	py := installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	realBin, _ := filepath.EvalSymlinks(bin)
	tests := []struct {
		name string
		// setup returns the install flags, the env, the Python that lists
		// kernelspecs and the kernels dir the spec must land in.
		setup func(t *testing.T) (args, env []string, listPy, kernels string)
	}{
		{"prefix", func(t *testing.T) ([]string, []string, string, string) {
			env, tmp := installEnv(t)
			prefix := filepath.Join(tmp, "prefix")
			env = append(env, "JUPYTER_PATH="+filepath.Join(prefix, "share/jupyter"), "JUPYTER_DATA_DIR="+filepath.Join(tmp, "data"))
			return []string{"--prefix", prefix, "--python", py}, env, py, filepath.Join(prefix, "share/jupyter/kernels")
		}},
		{"user with JUPYTER_DATA_DIR", func(t *testing.T) ([]string, []string, string, string) {
			env, tmp := installEnv(t)
			data := filepath.Join(tmp, "jd")
			env = append(env, "JUPYTER_DATA_DIR="+data)
			return []string{"--user", "--python", py}, env, py, filepath.Join(data, "kernels")
		}},
		{"sys-prefix of a venv", func(t *testing.T) ([]string, []string, string, string) {
			env, tmp := installEnv(t)
			env = append(env, "JUPYTER_DATA_DIR="+filepath.Join(tmp, "data"))
			venv := filepath.Join(tmp, "venv")
			// --system-site-packages: the venv sees Debian's ipykernel; works offline.
			if out, err := exec.Command(py, "-m", "venv", "--system-site-packages", "--without-pip", venv).CombinedOutput(); err != nil {
				msg := fmt.Sprintf("python3 -m venv (apt-get install python3-venv): %v\n%s", err, out)
				testutil.RequireOrSkip(t, "%s", msg)
			}
			vpy := filepath.Join(venv, "bin", "python3")
			return []string{"--sys-prefix", "--python", vpy}, env, vpy, filepath.Join(venv, "share/jupyter/kernels")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args, env, listPy, kernels := tc.setup(t)
			dir := filepath.Join(kernels, "tfgpu")
			r := runInstallBin(t, env, bin, append([]string{"install"}, args...)...)
			if r.code != 0 || !strings.Contains(r.stdout, dir) || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
				t.Fatalf("install %q: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
			}
			ks, ok := installListSpecs(t, env, listPy).Kernelspecs["tfgpu"]
			if !ok || ks.ResourceDir != dir || len(ks.Spec.Argv) == 0 || ks.Spec.Argv[0] != realBin {
				t.Fatalf("jupyter kernelspec list: tfgpu = %+v (listed %v); want resource_dir %s, argv[0] %s", ks, ok, dir, realBin)
			}

			// Someone else's kernelspec beside ours: --uninstall refuses it.
			foreign := filepath.Join(kernels, "notours")
			installWriteSpec(t, foreign, `{"argv":["`+py+`","-m","ipykernel_launcher","-f","{connection_file}"],"display_name":"Not ours","language":"python"}`, map[string]string{})
			r = runInstallBin(t, env, bin, append([]string{"install", "--uninstall", "--name", "notours"}, args...)...)
			if r.code != 1 || !isInstallErrLine(r.stderr, "tfgpu-kernel install: refusing to remove "+foreign) {
				t.Errorf("--uninstall of a foreign kernelspec: exit %d, stderr %q", r.code, r.stderr)
			}
			if _, err := os.Stat(filepath.Join(foreign, "kernel.json")); err != nil {
				t.Errorf("--uninstall touched the foreign kernelspec: %v", err)
			}

			// jupyter's own remove takes ours away cleanly.
			out, err := installPyCmd(env, listPy, "-m", "jupyter_client.kernelspecapp", "remove", "-f", "tfgpu")
			if err != nil {
				t.Fatalf("jupyter kernelspec remove -f tfgpu: %v\n%s", err, out)
			}
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("%s still there after jupyter kernelspec remove: %v", dir, err)
			}
			l := installListSpecs(t, env, listPy)
			if _, ok := l.Kernelspecs["tfgpu"]; ok {
				t.Errorf("tfgpu still listed after jupyter kernelspec remove")
			}
			if _, ok := l.Kernelspecs["notours"]; !ok {
				t.Errorf("the foreign kernelspec is no longer listed")
			}
			if got := testutil.DirNames(t, filepath.Dir(kernels)); strings.Join(got, " ") != "kernels" {
				t.Errorf("left beside kernels/: %q", got)
			}
			r = runInstallBin(t, env, bin, append([]string{"install", "--uninstall"}, args...)...)
			if r.code != 1 || !isInstallErrLine(r.stderr, "tfgpu-kernel install: no kernelspec at "+dir) {
				t.Errorf("--uninstall after remove: exit %d, stderr %q", r.code, r.stderr)
			}
		})
	}
}

// TestInstallRunFlags checks which run flags reach the kernelspec's argv:
// only those given, in a fixed order, as run parses them; not TFGPU_*
// variables of the installing shell.
func TestInstallRunFlags(t *testing.T) {
	py := installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	all := []string{"--log-level", "debug", "--nvml-library", "lib/libnvidia-ml.so.1", "--kill-timeout", "2000ms",
		"--inner-transport", "tcp", "--shutdown-grace", "500ms", "--confirm-timeout", "20s", "--memory-limit", "8G", "--cgroup", "v1", "--max-message-size", "2G",
		"--gpu-memory-limit", "40G"}
	tests := []struct {
		name     string
		args     []string
		env      []string
		wantRun  []string // argv between "run" and "-f"
		wantFail string   // stderr line prefix, exit 2
	}{
		{name: "none", wantRun: []string{}},
		{name: "all, any order", args: all, wantRun: []string{"--cgroup", "v1", "--memory-limit", "8G", "--gpu-memory-limit", "40G", "--confirm-timeout", "20s",
			"--shutdown-grace", "500ms", "--kill-timeout", "2s", "--inner-transport", "tcp", "--nvml-library", "@WD@/lib/libnvidia-ml.so.1",
			"--max-message-size", "2G", "--log-level", "debug"}},
		{name: "soname stays a soname", args: []string{"--nvml-library", "libnvidia-ml.so.1"}, wantRun: []string{"--nvml-library", "libnvidia-ml.so.1"}},
		{name: "empty value means run's default", args: []string{"--memory-limit", "", "--nvml-library="}, wantRun: []string{}},
		{name: "TFGPU_ variables are not flags given", env: []string{"TFGPU_LOG_LEVEL=debug", "TFGPU_CGROUP=v2"}, wantRun: []string{}},
		{name: "bad cgroup", args: []string{"--cgroup", "v3"}, wantFail: `tfgpu-kernel install: --cgroup "v3": want auto`},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantFail: `tfgpu-kernel install: --log-level "loud"`},
		{name: "zero confirm timeout", args: []string{"--confirm-timeout", "0s"}, wantFail: `tfgpu-kernel install: --confirm-timeout 0s`},
		{name: "bad inner transport", args: []string{"--inner-transport", "udp"}, wantFail: `tfgpu-kernel install: --inner-transport "udp"`},
		{name: "bad memory limit", args: []string{"--memory-limit", "0"}, wantFail: `tfgpu-kernel install: --memory-limit "0"`},
		{name: "bad GPU memory limit", args: []string{"--gpu-memory-limit", "lots"}, wantFail: `tfgpu-kernel install: --gpu-memory-limit "lots": want a size`},
		{name: "max message size under 1M", args: []string{"--max-message-size", "64K"}, wantFail: `tfgpu-kernel install: --max-message-size "64K": want a size of at least 1M`},
		{name: "bad duration", args: []string{"--kill-timeout", "soon"}, wantFail: `tfgpu-kernel install: --kill-timeout "soon": want a duration such as 1.5s`},
		{name: "negative kill timeout", args: []string{"--kill-timeout=-1s"}, wantFail: `tfgpu-kernel install: --kill-timeout -1s: want a positive duration`},
		{name: "memory limit too small to start a kernel", args: []string{"--memory-limit", "1K"}, wantFail: `tfgpu-kernel install: --memory-limit "1K": too small for any kernel (ipykernel alone needs about 70 MiB to start); want at least 128M, such as 8G`},
		{name: "GPU limit too small", args: []string{"--gpu-memory-limit", "100M"}, wantFail: `tfgpu-kernel install: --gpu-memory-limit "100M": too small`},
		{name: "bad TFGPU_ value in --env names it", args: []string{"--env", "TFGPU_GPU_MEMORY_LIMIT=abc"}, wantFail: `tfgpu-kernel install: --env TFGPU_GPU_MEMORY_LIMIT "abc": want a size such as 8G or 300M`},
		{name: "a TFGPU_ variable run does not read", args: []string{"--env", "TFGPU_GPU_MEM_LIMIT=8G"}, wantFail: `tfgpu-kernel install: --env TFGPU_GPU_MEM_LIMIT: tfgpu-kernel run has no such setting (it reads TFGPU_CGROUP, TFGPU_MEMORY_LIMIT`},
		{name: "a flag and its variable", args: []string{"--memory-limit", "1G", "--env", "TFGPU_MEMORY_LIMIT=2G"}, wantFail: `tfgpu-kernel install: --memory-limit and --env TFGPU_MEMORY_LIMIT are one setting; give one`},
		{name: "bad duration in --env", args: []string{"--env", "TFGPU_KILL_TIMEOUT=soon"}, wantFail: `tfgpu-kernel install: --env TFGPU_KILL_TIMEOUT="soon": want a duration such as 1.5s`},
		{name: "relative state dir in --env", args: []string{"--env", "TFGPU_STATE_DIR=state"}, wantFail: `tfgpu-kernel install: --env TFGPU_STATE_DIR="state": want an absolute directory`},
		{name: "a bad --env", args: []string{"--env", "NOVALUE"}, wantFail: `tfgpu-kernel install: --env "NOVALUE": want NAME=VALUE, such as CUDA_VISIBLE_DEVICES=0`},
		{name: "--reset without --replace", args: []string{"--reset"}, wantFail: `tfgpu-kernel install: --reset goes with --replace`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, tmp := installEnv(t, tc.env...)
			prefix := filepath.Join(tmp, "prefix")
			args := append([]string{"install", "--prefix", prefix, "--python", py}, tc.args...)
			cmd := exec.Command(bin, args...)
			cmd.Dir = tmp // a relative --nvml-library is relative to here
			var stdout, stderr bytes.Buffer
			cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
			err := cmd.Run()
			if tc.wantFail != "" {
				if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !isInstallErrLine(stderr.String(), tc.wantFail) || stdout.Len() > 0 {
					t.Errorf("%v, stdout %q, stderr %q; want exit 2 and %q…", err, stdout.String(), stderr.String(), tc.wantFail)
				}
				if _, err := os.Stat(prefix); !os.IsNotExist(err) {
					t.Errorf("a refused install wrote %s", prefix)
				}
				return
			}
			if err != nil {
				t.Fatalf("install: %v\n%s", err, stderr.String())
			}
			var s struct{ Argv []string }
			data, err := os.ReadFile(filepath.Join(prefix, "share/jupyter/kernels/tfgpu/kernel.json"))
			if err == nil {
				err = json.Unmarshal(data, &s)
			}
			testutil.NoErr(t, err)
			want := make([]string, len(tc.wantRun))
			for i, w := range tc.wantRun {
				want[i] = strings.ReplaceAll(w, "@WD@", tmp)
			}
			f := installIndex(s.Argv, "-f")
			if f < 2 || s.Argv[1] != "run" || strings.Join(s.Argv[2:f], " ") != strings.Join(want, " ") {
				t.Errorf("argv = %q; want run %q -f …", s.Argv, want)
			}
		})
	}
}

// TestInstallWrap wraps a conda-style kernelspec (found by name through
// JUPYTER_PATH) and starts both it and the wrapper through jupyter_client.
func TestInstallWrap(t *testing.T) {
	py := installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	realBin, _ := filepath.EvalSymlinks(bin)
	xdg, err := os.MkdirTemp("", "wrap-xdg-") // short: the supervisor's ipc paths must fit sun_path
	testutil.NoErr(t, err)
	t.Cleanup(func() { os.RemoveAll(xdg) })
	tag := e2eTag(t)
	env, tmp := installEnv(t, "XDG_RUNTIME_DIR="+xdg, "E2E_TAG="+tag)
	jp, data := filepath.Join(tmp, "prefix/share/jupyter"), filepath.Join(tmp, "data")
	env = append(env, "JUPYTER_PATH="+jp, "JUPYTER_DATA_DIR="+data)
	theirs := filepath.Join(jp, "kernels/condaenv")
	installWriteSpec(t, theirs, `{
 "argv": ["`+py+`", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
 "display_name": "Conda (tf)",
 "language": "python",
 "env": {"FOO": "bar"},
 "metadata": {"debugger": true, "conda_env_path": "/opt/conda/envs/tf"}
}
`, map[string]string{"logo-64x64.png": "their logo"})
	before := installTreeSum(t, theirs)

	r := runInstallBin(t, env, bin, "install", "--wrap", "condaenv", "--env", "EXTRA=1", "--log-level", "debug")
	wrapper := filepath.Join(data, "kernels/condaenv-tfgpu")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, wrapper) || !strings.Contains(r.stdout, theirs) {
		t.Fatalf("install --wrap: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// Golden kernel.json, with the temp paths named.
	got := readInstallFile(t, filepath.Join(wrapper, "kernel.json"))
	got = bytes.ReplaceAll(got, []byte(realBin), []byte("@BIN@"))
	got = bytes.ReplaceAll(got, []byte(tmp), []byte("@TMP@"))
	got = bytes.ReplaceAll(got, []byte(py), []byte("@PYTHON@"))
	golden := filepath.Join("testdata", "install", "wrap.kernel.json")
	if *updateInstallGolden {
		testutil.NoErr(t, os.WriteFile(golden, got, 0o644))
	}
	if want := readInstallFile(t, golden); !bytes.Equal(got, want) {
		t.Errorf("kernel.json differs from %s (go test -update-install to rewrite):\n%s", golden, got)
	}
	if logo := readInstallFile(t, filepath.Join(wrapper, "logo-64x64.png")); string(logo) != "their logo" {
		t.Errorf("wrapper's logo is not theirs")
	}

	l := installListSpecs(t, env, py)
	if ks := l.Kernelspecs["condaenv-tfgpu"]; ks.ResourceDir != wrapper || ks.Spec.DisplayName != "Conda (tf) (clean restart)" {
		t.Errorf("jupyter kernelspec list: condaenv-tfgpu = %+v", ks)
	}
	if ks := l.Kernelspecs["condaenv"]; ks.ResourceDir != theirs {
		t.Errorf("jupyter kernelspec list: condaenv = %+v", ks)
	}

	// Refusals: exit 2, one line, nothing written.
	installWriteSpec(t, filepath.Join(jp, "kernels/noconn"), `{"argv":["`+py+`","-m","ipykernel_launcher","--f={connection_file}"],"display_name":"x","language":"python"}`, map[string]string{})
	for _, tc := range []struct{ name, want string }{
		{"nosuch", `tfgpu-kernel install: no kernelspec "nosuch" among those python `},
		{"noconn", `tfgpu-kernel install: cannot wrap "noconn": its argv has no "{connection_file}" argument`},
		{"condaenv-tfgpu", `tfgpu-kernel install: refusing to wrap "condaenv-tfgpu"`},
		{wrapper, `tfgpu-kernel install: refusing to wrap "condaenv-tfgpu"`},
	} {
		r := runInstallBin(t, env, bin, "install", "--wrap", tc.name, "--name", "refused")
		if r.code != 2 || !isInstallErrLine(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("install --wrap %s: exit %d, stderr %q; want exit 2 and %q…", tc.name, r.code, r.stderr, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "kernels/refused")); !os.IsNotExist(err) {
		t.Errorf("a refused wrap wrote a kernelspec: %v", err)
	}

	// Start both through jupyter_client and run a cell in each.
	res := installStartBoth(t, env, py, tag, "condaenv-tfgpu", "condaenv")
	w, c := res.Kernels["condaenv-tfgpu"], res.Kernels["condaenv"]
	if w.Status != "ok" || w.Foo != "bar" || w.Extra != "1" {
		t.Errorf("wrapped kernel: status %q, FOO=%q EXTRA=%q; want ok, bar, 1", w.Status, w.Foo, w.Extra)
	}
	if w.PpidExe != realBin || w.Ppid != w.ProvisionerPid || w.JpyParentPid != strconv.Itoa(w.ProvisionerPid) {
		t.Errorf("wrapped kernel does not run under the supervisor: parent %d (%s), JPY_PARENT_PID %s, jupyter_client started %d",
			w.Ppid, w.PpidExe, w.JpyParentPid, w.ProvisionerPid)
	}
	if c.Status != "ok" || c.Foo != "bar" || c.Extra != "" || c.Pid != c.ProvisionerPid || c.Ppid != res.ScriptPid {
		t.Errorf("their kernel: status %q, FOO=%q EXTRA=%q, pid %d (jupyter_client started %d), parent %d (client %d)",
			c.Status, c.Foo, c.Extra, c.Pid, c.ProvisionerPid, c.Ppid, res.ScriptPid)
	}

	// --uninstall of the wrap removes the wrapper only.
	r = runInstallBin(t, env, bin, "install", "--uninstall", "--wrap", "condaenv")
	if r.code != 0 || !strings.Contains(r.stdout, wrapper) {
		t.Errorf("install --uninstall --wrap condaenv: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	l = installListSpecs(t, env, py)
	if _, ok := l.Kernelspecs["condaenv-tfgpu"]; ok {
		t.Errorf("condaenv-tfgpu still listed after --uninstall")
	}
	if ks := l.Kernelspecs["condaenv"]; ks.ResourceDir != theirs {
		t.Errorf("condaenv no longer listed after the wrapper's --uninstall")
	}
	// Theirs is not ours to remove, and was never changed.
	r = runInstallBin(t, env, bin, "install", "--uninstall", "--name", "condaenv", "--prefix", filepath.Join(tmp, "prefix"))
	if r.code != 1 || !isInstallErrLine(r.stderr, "tfgpu-kernel install: refusing to remove "+theirs) {
		t.Errorf("--uninstall of the wrapped kernelspec: exit %d, stderr %q", r.code, r.stderr)
	}
	if installTreeSum(t, theirs) != before {
		t.Errorf("the wrapped kernelspec %s changed", theirs)
	}
}

type installCell struct {
	Pid            int    `json:"pid"`
	Ppid           int    `json:"ppid"`
	PpidExe        string `json:"ppid_exe"`
	Foo            string `json:"foo"`
	Extra          string `json:"extra"`
	JpyParentPid   string `json:"jpy_parent_pid"`
	ProvisionerPid int    `json:"provisioner_pid"`
	Status         string `json:"status"`
}

type installStartResult struct {
	Kernels   map[string]installCell
	Pids      []int
	ScriptPid int
}

// installStartBoth runs testdata/install/startboth.py for the kernelspecs names in
// a process group of its own, then makes sure every process it started
// (by pid, and by E2E_TAG in the environment) is gone, killing and
// reaping what is not.
func installStartBoth(t *testing.T, env []string, py, tag string, names ...string) installStartResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script, err := filepath.Abs(filepath.Join("testdata", "install", "startboth.py"))
	testutil.NoErr(t, err)
	cmd := exec.CommandContext(ctx, py, append([]string{script}, names...)...)
	var stdout, stderr bytes.Buffer
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	ended := time.Now()

	var raw map[string]json.RawMessage
	line := stdout.String()
	if i := strings.LastIndex(line, "RESULT "); i >= 0 {
		line = strings.TrimSpace(line[i+len("RESULT "):])
	}
	parseErr := json.Unmarshal([]byte(line), &raw)
	res := installStartResult{Kernels: map[string]installCell{}}
	var scriptErr string
	for k, v := range raw {
		switch k {
		case "pids":
			_ = json.Unmarshal(v, &res.Pids)
		case "script_pid":
			_ = json.Unmarshal(v, &res.ScriptPid)
		case "error":
			_ = json.Unmarshal(v, &scriptErr)
		default:
			var c installCell
			_ = json.Unmarshal(v, &c)
			res.Kernels[k] = c
		}
	}
	// Survivors: jupyter_client shut both kernels down; wait for them to be
	// gone (docs/design.md#shutdown-and-restart's 2 s is a figure, the bound
	// only a failure's), then kill what is left, each by its pid.
	var left []int
	for {
		left = e2eAlive(tag, res.Pids)
		if len(left) == 0 || time.Since(ended) > e2eSurviveWait {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(left) > 0 {
		desc := e2eDescribe(left)
		e2eKill(left)
		t.Errorf("%d processes survived the kernels' shutdown (killed now):\n  %s", len(left), strings.Join(desc, "\n  "))
	}
	e2eReapOrphans()
	if runErr != nil || parseErr != nil || scriptErr != "" {
		t.Fatalf("startboth.py: %v, %v\n%s\nstdout:\n%s\nstderr:\n%s", runErr, parseErr, scriptErr, stdout.String(), e2eTail(stderr.String(), 4000))
	}
	return res
}

// installTreeSum describes every file under dir: name, mode, mtime, content.
func installTreeSum(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d\n", p, fi.Mode(), fi.ModTime().UnixNano())
		if d.Type().IsRegular() {
			b.Write(readInstallFile(t, p))
		}
		return nil
	})
	testutil.NoErr(t, err)
	return b.String()
}

func readInstallFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	testutil.NoErr(t, err)
	return b
}

func installPyCmd(env []string, py string, args ...string) (string, error) {
	cmd := exec.Command(py, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func installIndex(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}
