package testutil

import (
	"os"
	"slices"
	"strings"
)

// JupyterEnv are the environment variables that move where Jupyter and
// IPython look for kernelspecs, config and runtime files (jupyter_core's
// paths, IPython's profile directory): set in the shell of whoever runs
// go test, they would choose what a test's jupyter_client finds.
// Hermetic removes them; a test that wants one sets it (t.Setenv).
var JupyterEnv = []string{
	"JUPYTER_PATH", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_CONFIG_PATH", "JUPYTER_RUNTIME_DIR",
	"JUPYTER_PLATFORM_DIRS", "JUPYTER_PREFER_ENV_PATH", "JUPYTER_NO_CONFIG", "JUPYTER_ALLOW_INSECURE_WRITES",
	"XDG_DATA_HOME", "XDG_CONFIG_HOME", "IPYTHONDIR",
}

// hostEnvPrefixes are the other variables of a host's environment that
// would change what the code under test does: XDG's (the state
// directory, platformdirs' Jupyter paths, a systemd user session),
// Slurm's (SLURM_JOB_ID makes a supervisor look for its job's cgroup;
// a test run inside srun or sbatch has them) and this program's own
// TFGPU_ settings (TFGPU_MEMORY_LIMIT, TFGPU_STATE_DIR, a typo run
// refuses, the marker of a kernel's tree when go test runs in a
// notebook's terminal), and Jupyter's JPY_ ones (JPY_PARENT_PID, which a
// supervisor watches, in a notebook's terminal or !go test), but for
// TestControlEnv.
var hostEnvPrefixes = []string{"XDG_", "SLURM", "SBATCH_", "SRUN_", "SALLOC_", "TFGPU_", "JPY_"}

// hostEnvNames are the variables by which internal/engine takes the host
// for a container's (go test run in a pod or a toolbox).
var hostEnvNames = []string{"container", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}

// gpuEnv choose the GPUs a supervisor confirms (wrapper/gpu.go): the
// host's would change what the tests of the fake NVML see, but for the
// real-GPU check (TFGPU_REAL_GPU), which runs on them on purpose.
var gpuEnv = []string{"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}

// TestControlEnv are the TFGPU_ variables that steer the tests
// themselves (a helper process's role, the real-GPU check, fuzzing
// time, where figures go): Hermetic keeps them. Each is in
// cmd/tfgpu-kernel's internalEnv.
var TestControlEnv = []string{
	"TFGPU_TEST_HERMETIC", "TFGPU_TEST_AS_COMMAND", "TFGPU_TEST_SUPERVISOR", "TFGPU_TEST_SECRET",
	"TFGPU_REAL_GPU", "TFGPU_REAL_GPU_OUT", "TFGPU_REAL_GPU_PYTHON", "TFGPU_E2E_KERNEL",
	"TFGPU_FIGURE_OUT", "TFGPU_ARTIFACTS", "TFGPU_BENCH_JSON", "TFGPU_BENCH_QUICK",
	"TFGPU_FUZZTIME", "TFGPU_CHAOS_SEEDS", "TFGPU_ZMTP_ATTACK",
	"TFGPU_FAKE_KERNEL", "TFGPU_FAKE_SLEEPER", "TFGPU_FAKE_SPAWN_FILE", "TFGPU_FAKE_DELAY",
}

// IsHostEnv reports whether the variable named k is one of the host's
// that Hermetic and CleanEnv remove: JupyterEnv, XDG_*, Slurm's, a
// container's, JPY_*, the GPUs' (but for the real-GPU check), and
// TFGPU_* but TestControlEnv.
func IsHostEnv(k string) bool {
	if slices.Contains(JupyterEnv, k) || slices.Contains(hostEnvNames, k) {
		return true
	}
	if slices.Contains(gpuEnv, k) {
		return os.Getenv("TFGPU_REAL_GPU") == ""
	}
	for _, p := range hostEnvPrefixes {
		if strings.HasPrefix(k, p) {
			return !slices.Contains(TestControlEnv, k)
		}
	}
	return false
}

// CleanEnv removes from the environment every variable IsHostEnv names,
// so that nothing of the shell of whoever runs go test changes an
// outcome; a test that wants one sets it (t.Setenv). Hermetic calls it;
// a package whose tests need no namespace calls it first thing in
// TestMain, after the branches where the binary plays a helper process.
func CleanEnv() {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); IsHostEnv(k) {
			os.Unsetenv(k)
		}
	}
}
