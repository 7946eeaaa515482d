//go:build linux

package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// plantedKernels are the kernelspecs TestQuickTestsOnAPlantedHost
// installs system-wide: those a real host has (IRkernel's, a Julia's,
// Debian's python3).
var plantedKernels = []string{"ir", "julia-1.10", "python3"}

// pathSensitive are the quick tests of each package whose outcome a host
// could change: what Jupyter finds (kernelspec), the TFGPU_ variables a
// supervisor reads (internal/runflags, wrapper's supervisor
// process), Slurm's detection (internal/engine, internal/record's ps of
// a Slurm job) and the cgroup mode of a supervisor (wrapper).
var pathSensitive = map[string][]string{
	"./kernelspec":        {"TestWrapFindSpec", "TestJupyterFindsNothingOfTheHost", "TestDirUserMatchesJupyter", "TestRunsBinary"},
	"./internal/runflags": {"TestRunConfigRefusesBadSettings", "TestCheckRunEnv"},
	"./wrapper":           {"TestIdentitiesSurviveASIGKILL"},
	"./internal/engine":   {"TestDetect"},
	"./internal/record":   {"TestPSSaysTheKernelEndedWithItsSlurmJob"},
	"./internal/testutil": {"TestCleanEnvKeepsOnlyTheTests"},
}

// TestQuickTestsOnAPlantedHost runs the path-sensitive quick tests of
// every package (go test -count=1 -run ..., a child) on a machine that
// has what real hosts have: kernelspecs ir, julia-1.10 and python3 in
// /usr/share/jupyter/kernels, /usr/local/share/jupyter/kernels, the
// sys.prefix of the python3 on PATH (a pyenv's) and the home's; Jupyter's
// variables pointing at more of them; XDG's; a Slurm job
// (SLURM_JOB_ID, SLURM_STEP_ID, and slurmstepd among the parent
// processes, as proctrack/linuxproc has it); and TFGPU_ settings in the
// shell (a typo run refuses, a memory limit, a state directory, a cgroup
// mode). The system directories are planted in a mount namespace of the
// child's own (testutil.Host), so nothing on the machine changes. They
// pass: each package's TestMain hides the host (Hermetic, CleanEnv). The
// control first checks that the child sees what was planted.
func TestQuickTestsOnAPlantedHost(t *testing.T) {
	Integration(t) // builds and runs other packages' tests
	RequireHermetic(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		RequireOrSkip(t, "needs the go command on PATH: %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	NoErr(t, err)
	tmp := t.TempDir()
	plant := func(kernels string, names ...string) string {
		t.Helper()
		for _, name := range names {
			argv := `["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]`
			switch name {
			case "ir":
				argv = `["R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"]`
			case "julia-1.10":
				argv = `["/opt/julia-1.10/bin/julia", "-i", "--color=yes", "/root/.julia/packages/IJulia/kernel.jl", "{connection_file}"]`
			}
			d := filepath.Join(kernels, name)
			NoErr(t, os.MkdirAll(d, 0o755))
			kj := `{"argv": ` + argv + `, "display_name": "host's ` + name + `", "language": "x", "metadata": {}}`
			NoErr(t, os.WriteFile(filepath.Join(d, "kernel.json"), []byte(kj), 0o644))
		}
		return kernels
	}
	all := append(slices.Clone(plantedKernels), "dup", "mixed") // and the names kernelspec's tests make
	dirs := map[string]string{
		"/usr/share/jupyter/kernels":       plant(filepath.Join(tmp, "usr"), all...),
		"/usr/local/share/jupyter/kernels": plant(filepath.Join(tmp, "usrlocal"), all...),
	}
	for _, d := range probePythonPrefixDirs() {
		if strings.HasSuffix(d, "/kernels") {
			dirs[d] = plant(filepath.Join(tmp, "prefix", filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(d))))), all...)
		}
	}
	home := filepath.Join(tmp, "home")
	plant(filepath.Join(home, ".local/share/jupyter/kernels"), all...)
	plant(filepath.Join(tmp, "xdg", "jupyter", "kernels"), "from-xdg")
	state := filepath.Join(tmp, "state")
	NoErr(t, os.Mkdir(state, 0o700))
	// slurmstepd, as proctrack/linuxproc has it, the parent of the job's
	// processes (a script's comm is its name), waiting for them.
	stepd := filepath.Join(tmp, "bin", "slurmstepd")
	NoErr(t, os.MkdirAll(filepath.Dir(stepd), 0o755))
	NoErr(t, os.WriteFile(stepd, []byte("#!/bin/sh\n\"$@\"\n"), 0o755))
	env := []string{
		"HOME=" + home,
		// go's own, which HOME would otherwise move (a cold build cache)
		"GOCACHE=" + goEnv(t, goBin, "GOCACHE"), "GOMODCACHE=" + goEnv(t, goBin, "GOMODCACHE"), "GOPATH=" + goEnv(t, goBin, "GOPATH"),
		"JUPYTER_PATH=" + filepath.Dir(plant(filepath.Join(tmp, "jupyter-path", "kernels"), "from-jupyter-path", "dup")),
		"JUPYTER_DATA_DIR=" + filepath.Dir(plant(filepath.Join(tmp, "jupyter-data", "kernels"), "from-jupyter-data", "mixed")),
		"JUPYTER_CONFIG_DIR=" + filepath.Join(tmp, "config"),
		"JUPYTER_RUNTIME_DIR=" + filepath.Join(tmp, "runtime"),
		"IPYTHONDIR=" + filepath.Join(tmp, "ipython"),
		"XDG_DATA_HOME=" + filepath.Join(tmp, "xdg"),
		"XDG_RUNTIME_DIR=" + state,
		"XDG_STATE_HOME=" + state,
		"SLURM_JOB_ID=4242", "SLURM_STEP_ID=0", "SLURM_JOB_UID=0", "SLURM_CPUS_ON_NODE=1",
		"TFGPU_MEMORY_LIMT=8G", // a typo run refuses
		"TFGPU_MEMORY_LIMIT=64M",
		"TFGPU_CGROUP=v3", // no such mode: a supervisor that reads it refuses
		"TFGPU_STATE_DIR=" + state,
		"TFGPU_LOG_LEVEL=error",
		"JPY_PARENT_PID=2147483646", "JPY_SESSION_NAME=planted.ipynb", // a notebook's !go test; that pid does not exist
		"CUDA_VISIBLE_DEVICES=7",
	}
	host := Host{Dirs: dirs, Env: env}

	// The control: nothing hidden, the child sees what was planted.
	probe := `for d in "$@"; do ls "$d"; done; env`
	argv := []string{"sh", "-c", probe, "sh"}
	for d := range dirs {
		argv = append(argv, d)
	}
	out, err := host.Exec(t, false, argv...)
	if err != nil {
		t.Fatalf("control: %v\n%s", err, out)
	}
	for _, want := range append(slices.Clone(plantedKernels), "SLURM_JOB_ID=4242", "TFGPU_MEMORY_LIMT=8G", "JUPYTER_PATH=") {
		if !strings.Contains(out, want) {
			t.Fatalf("control: the child does not see the planted %q:\n%s", want, out)
		}
	}

	var pkgs, names []string
	for p, tests := range pathSensitive {
		pkgs = append(pkgs, p)
		names = append(names, tests...)
	}
	slices.Sort(pkgs)
	slices.Sort(names)
	run := "^(" + strings.Join(names, "|") + ")$"
	out, err = host.Exec(t, true, append([]string{stepd, goBin, "-C", root, "test", "-count=1", "-v", "-run", run, "-timeout=4m"}, pkgs...)...)
	if err != nil {
		t.Fatalf("go test -run '%s' %s on a planted host: %v\n%s", run, strings.Join(pkgs, " "), err, out)
	}
	var missing []string
	for _, name := range names {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			missing = append(missing, name)
		}
	}
	if missing != nil {
		t.Errorf("%s did not pass (run, not skipped):\n%s", missing, out)
	}
}

// goEnv is go env name.
func goEnv(t *testing.T, goBin, name string) string {
	t.Helper()
	out, err := exec.Command(goBin, "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// TestCleanEnvKeepsOnlyTheTests: after TestMain's Hermetic, the test
// binary has no variable of the host's (IsHostEnv) but the tests' own.
func TestCleanEnvKeepsOnlyTheTests(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); IsHostEnv(k) {
			t.Errorf("%s in the tests' environment", kv)
		}
	}
	for _, k := range []string{"SLURM_JOB_ID", "SLURMD_NODENAME", "SBATCH_ACCOUNT", "XDG_RUNTIME_DIR", "XDG_DATA_DIRS",
		"JUPYTER_PATH", "IPYTHONDIR", "TFGPU_MEMORY_LIMIT", "TFGPU_MEMORY_LIMT", "TFGPU_TREE", "container", "JPY_PARENT_PID"} {
		if !IsHostEnv(k) {
			t.Errorf("IsHostEnv(%s) = false", k)
		}
	}
	for _, k := range append(TestControlEnv, "PATH", "HOME", "GOCACHE", "CI", "SLUR") {
		if IsHostEnv(k) {
			t.Errorf("IsHostEnv(%s) = true", k)
		}
	}
}
