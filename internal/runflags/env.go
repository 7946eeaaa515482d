package runflags

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// The TFGPU_ variables, in one place. Each setting of `run` has one,
// TFGPU_<FLAG> (EnvName): the kernelspec's env or the Jupyter server's
// environment can set it. Any other TFGPU_ name is a typo that would be
// ignored (TFGPU_MEMORY_LIMT=8G: a kernel without the limit its user
// asked for), so `run` refuses it (Config) and `install` refuses it in
// a kernelspec's env (CheckKernelspecEnv), with the same line (NoSuchSetting), but
// for the names this program and its tests set for their own processes
// (InternalEnv), which `run` may find in its environment and takes
// without a word.

// FlagOfEnv is the run flag a TFGPU_ variable stands for: one a
// kernelspec's argv may carry (KernelspecFlags), or --state-dir.
func FlagOfEnv(k string) (string, bool) {
	for _, name := range append(slices.Clone(KernelspecFlags), "state-dir") {
		if EnvName(name) == k {
			return name, true
		}
	}
	return "", false
}

// NoSuchSetting is the one line for a TFGPU_ variable that is no setting
// of run's; name is the variable as the user gave it (install's
// "--env TFGPU_MEMORY_LIMT", run's "TFGPU_MEMORY_LIMT").
func NoSuchSetting(name string) error {
	var known []string
	for _, f := range KernelspecFlags {
		known = append(known, EnvName(f))
	}
	return fmt.Errorf("%s: tfgpu-kernel run has no such setting (it reads %s and TFGPU_STATE_DIR)", name, strings.Join(known, ", "))
}

// InternalEnv are the TFGPU_ variables that set nothing of run's but that
// run may find in its environment, because this program or its tests put
// them there for a process of their own and what it starts inherits them.
// A file named without a directory is cmd/tfgpu-kernel's.
// TestEveryTFGPUNameIsKnown finds every TFGPU_ name the repository uses
// (Go, Python, shell, docs) and fails on one that is in neither this list
// nor run's settings.
var InternalEnv = map[string]string{
	// This program's own.
	proc.MarkerEnv:        "the marker of a kernel's tree (wrapper/spawn.go): whatever a kernel starts inherits it, a Jupyter server started from a notebook's terminal and its kernels included",
	"TFGPU_SPARE_PRELOAD": "the modules a spare imports (wrapper/spare), for its Python, which removes it at once",
	"TFGPU_WATCHER":       "a watcher started by a supervisor of an earlier version (main.go's hiddenRole)",

	// The tests' and their scripts', read from the environment a developer
	// runs them in and passed on to the kernels they start.
	"TFGPU_TEST_HERMETIC":   "the test binary runs in its own mount namespace (internal/testutil/hermetic.go)",
	"TFGPU_TEST_HIDE_DIRS":  "internal/testutil/hermetic.go",
	"TFGPU_TEST_HIDE_FILES": "internal/testutil/hermetic.go",
	"TFGPU_TEST_AS_COMMAND": "the test binary is the tfgpu-kernel command (main_test.go)",
	"TFGPU_REAL_GPU":        "the real-GPU check (realgpu_test.go)",
	"TFGPU_REAL_GPU_OUT":    "realgpu_test.go",
	"TFGPU_REAL_GPU_PYTHON": "realgpu_test.go",
	"TFGPU_E2E_KERNEL":      "the e2e scenarios against a stock kernelspec (scenario_test.go)",
	"TFGPU_FIGURE_OUT":      "where the figure tests write (e2e_figure_test.go)",
	"TFGPU_ARTIFACTS":       "where the browser tests write (e2e_browser_test.go)",
	"TFGPU_BENCH_JSON":      "the benchmarks (bench_test.go, testdata/bench)",
	"TFGPU_BENCH_QUICK":     "the benchmarks' smoke run",
	"TFGPU_FUZZTIME":        "internal/testutil/fuzz.go",
	"TFGPU_CHAOS_SEEDS":     "internal/zmtp's peers test",
	"TFGPU_ZMTP_ATTACK":     "internal/zmtp's attacker process",
	// The wrapper package's test binary, which plays the supervisor, the
	// fake kernel and a sleeper by these.
	"TFGPU_TEST_SUPERVISOR": "wrapper's tests",
	"TFGPU_TEST_SECRET":     "wrapper's tests",
	"TFGPU_FAKE_KERNEL":     "wrapper's tests",
	"TFGPU_FAKE_SLEEPER":    "wrapper's tests",
	"TFGPU_FAKE_SPAWN_FILE": "wrapper's tests",
	"TFGPU_FAKE_DELAY":      "wrapper's tests",
}

// CheckEnv refuses a TFGPU_ variable in environ (KEY=VALUE, as
// os.Environ) that run would ignore: neither a setting nor InternalEnv.
// Empty ones too: TFGPU_MEMORY_LIMT= meant to clear a limit the server's
// environment sets clears nothing. With several, the first in sorted order
// is named.
func CheckEnv(environ []string) error {
	var unknown []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "TFGPU_") {
			continue
		}
		if _, ok := FlagOfEnv(k); ok {
			continue
		}
		if _, ok := InternalEnv[k]; ok {
			continue
		}
		unknown = append(unknown, k)
	}
	if len(unknown) == 0 {
		return nil
	}
	return NoSuchSetting(record.Printable(slices.Min(unknown)))
}

// CheckKernelspecEnv checks every TFGPU_ variable a kernelspec's env
// will carry (install's --env, and those kept) as run will read it at
// each start: a variable run does not know is a typo that would be
// ignored, a bad value a kernel that never starts. given says whether a
// run flag was given on install's command line (not kept): it and its
// variable are one setting.
func CheckKernelspecEnv(env map[string]string, given func(flag string) bool) error {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		if !strings.HasPrefix(k, "TFGPU_") {
			continue
		}
		name, ok := FlagOfEnv(k)
		if !ok {
			return NoSuchSetting("--env " + k) // the line run says for it
		}
		if given(name) {
			return fmt.Errorf("--%s and --env %s are one setting; give one", name, k)
		}
		if name == "state-dir" {
			if !filepath.IsAbs(v) {
				return fmt.Errorf("--env %s=%q: want an absolute directory, such as /var/lib/tfgpu-kernel", k, v)
			}
			continue
		}
		if v == "" {
			continue // empty: run's default (Parse ignores an empty variable)
		}
		var rf Flags // a fresh set of run flags: only this value is checked
		one := flag.NewFlagSet("run", flag.ContinueOnError)
		one.SetOutput(io.Discard)
		rf.Define(one)
		if err := one.Set(name, v); err != nil {
			return fmt.Errorf("--env %s=%q: %v", k, v, err)
		}
		if _, err := rf.Check(Source{name: "--env " + k}); err != nil {
			return err
		}
	}
	return nil
}
