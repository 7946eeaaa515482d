package main

// The benchmark of docs/benchmarks.md: the same workloads against the wrapped kernel
// (tfgpu-kernel run -- ipykernel), the same ipykernel run directly, and a
// plain byte proxy in front of it (testdata/benchproxy: the floor of any
// relay process here), side by side in one run, interleaved so that noise
// hits all alike.
//
//	go test ./cmd/tfgpu-kernel -run '^$' -bench Kernel -benchtime 1x -timeout 20m
//
// prints one line per figure (figure | wrapped | direct | floor | ÷direct |
// ÷floor | budget | ok?; the relay's budgets are against the floor, #25)
// with the medians and the per-kernel samples; TFGPU_BENCH_JSON=path also
// writes them as JSON. The workloads are in testdata/bench/bench.py, run with
// Debian's /usr/bin/python3 (jupyter_client 7.4.9, ipykernel 6.17).
// TFGPU_BENCH_QUICK=1 runs tiny sizes: a smoke test of the harness, as
// TestBenchSmoke does in every `go test`.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

const benchPython = "/usr/bin/python3"

// benchJupyterPython fails in CI (CI=true) and skips elsewhere when Debian's
// Jupyter stack is missing.
func benchJupyterPython(tb testing.TB) {
	tb.Helper()
	testutil.Integration(tb)
	out, err := exec.Command(benchPython, "-c", "import ipykernel, jupyter_client, zmq").CombinedOutput()
	if err == nil {
		return
	}
	msg := "need " + benchPython + " with ipykernel and jupyter_client (apt-get install python3-ipykernel python3-jupyter-client): " + strings.TrimSpace(string(out))
	testutil.RequireOrSkip(tb, "%s", msg)
}

// benchSetup builds the supervisor (with lazy binding, as install.sh does)
// and writes two kernelspecs under dir/jupyter/kernels: "tfgpu", the
// supervisor wrapping ipykernel, and "direct", the same ipykernel alone. It
// returns the environment for bench.py. The kernel.json files are written
// here rather than with `tfgpu-kernel install` so that the benchmark measures
// exactly these two argvs whatever install's defaults become.
func benchSetup(tb testing.TB, dir string) []string {
	tb.Helper()
	return benchSetupWith(tb, dir, benchPython, "")
}

// benchSetupWith is benchSetup for another Python (its ipykernel runs in
// both kernelspecs, and bench.py runs with it) and, when encryption is set
// ("required"), jupyter_client's transport_encryption: both kernelspecs
// declare supported_encryption, so both kernels' clients speak CurveZMQ
// (ipykernel ≥ 7.3 does it itself).
func benchSetupWith(tb testing.TB, dir, python, encryption string) []string {
	tb.Helper()
	bin := filepath.Join(dir, "tfgpu-kernel")
	build := exec.Command("go", "build", "-ldflags=-extldflags=-Wl,-z,lazy", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	kernelArgv := []string{python, "-m", "ipykernel_launcher", "-f", "{connection_file}"}
	metadata := map[string]any{"debugger": true}
	if encryption != "" {
		metadata["supported_encryption"] = []string{"curve"}
	}
	proxy := filepath.Join(dir, "benchproxy")
	build = exec.Command("go", "build", "-o", proxy, "./testdata/benchproxy")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build benchproxy: %v\n%s", err, out)
	}
	specs := map[string][]string{
		"tfgpu":  append([]string{bin, "run", "-f", "{connection_file}", "--"}, kernelArgv...),
		"direct": kernelArgv,
		"floor":  append([]string{proxy, "{connection_file}"}, kernelArgv...),
	}
	for _, mode := range restartModes {
		specs["tfgpu-"+mode] = append([]string{bin, "run", "--cgroup", mode, "-f", "{connection_file}", "--"}, kernelArgv...)
	}
	// The spare kernel's comparison (BenchmarkRestartSpare).
	specs["tfgpu-cold"] = append([]string{bin, "run", "--no-spare", "-f", "{connection_file}", "--"}, kernelArgv...)
	specs["tfgpu-preload"] = append([]string{bin, "run", "--preload", benchPreload(python), "-f", "{connection_file}", "--"}, kernelArgv...)
	abs, _ := filepath.Abs(filepath.Join("testdata", "bench", "nullkernel.py"))
	specs["null"] = []string{python, abs, "-f", "{connection_file}"}
	for name, argv := range specs {
		kdir := filepath.Join(dir, "jupyter", "kernels", name)
		testutil.NoErr(tb, os.MkdirAll(kdir, 0o755))
		spec, err := json.MarshalIndent(map[string]any{
			"argv":           argv,
			"display_name":   "bench " + name,
			"language":       "python",
			"interrupt_mode": "signal",
			"metadata":       metadata,
		}, "", " ")
		testutil.NoErr(tb, err)
		testutil.NoErr(tb, os.WriteFile(filepath.Join(kdir, "kernel.json"), spec, 0o644))
	}
	for _, d := range []string{"runtime", "data", "ipython", "logs"} {
		testutil.NoErr(tb, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	return append(os.Environ(),
		"JUPYTER_PATH="+filepath.Join(dir, "jupyter"),
		"JUPYTER_DATA_DIR="+filepath.Join(dir, "data"),
		"JUPYTER_RUNTIME_DIR="+filepath.Join(dir, "runtime"),
		"IPYTHONDIR="+filepath.Join(dir, "ipython"),
		"BENCH_WRAPPED_KERNEL=tfgpu",
		"BENCH_DIRECT_KERNEL=direct",
		"BENCH_LOG_DIR="+filepath.Join(dir, "logs"),
		"BENCH_ENCRYPTION="+encryption,
		"BENCH_PYTHON="+python,
		"PYTHONUNBUFFERED=1",
	)
}

type benchFigure struct {
	Key     string   `json:"key"`
	Figure  string   `json:"figure"`
	Wrapped *float64 `json:"wrapped"`
	Direct  *float64 `json:"direct"`
	Ratio   *float64 `json:"ratio"` // wrapped ÷ direct
	// Floor is the byte proxy's figure, FloorRatio wrapped ÷ floor.
	Floor      *float64 `json:"floor"`
	FloorRatio *float64 `json:"floor_ratio"`
	Budget     string   `json:"budget"`
	OK         bool     `json:"ok"`
	Unit       string   `json:"unit"`
}

type benchResults struct {
	Quick   bool          `json:"quick"`
	Figures []benchFigure `json:"figures"`
	Errors  []string      `json:"errors"`
}

// benchRun runs bench.py to the end and returns its stdout and parsed JSON.
// On timeout bench.py gets SIGTERM, on which it shuts its kernels down.
func benchRun(tb testing.TB, env []string, dir string, quick bool, timeout time.Duration) (string, benchResults) {
	tb.Helper()
	jsonPath := os.Getenv("TFGPU_BENCH_JSON")
	if jsonPath == "" || quick {
		jsonPath = filepath.Join(dir, "results.json")
	}
	env = append(env, "TFGPU_BENCH_JSON="+jsonPath)
	if quick {
		env = append(env, "TFGPU_BENCH_QUICK=1")
	}
	script, err := filepath.Abs(filepath.Join("testdata", "bench", "bench.py"))
	testutil.NoErr(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout strings.Builder
	python := benchPython
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "BENCH_PYTHON="); ok {
			python = v
		}
	}
	cmd := exec.CommandContext(ctx, python, script)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout = &stdout
	if !quick {
		cmd.Stdout = io.MultiWriter(&stdout, os.Stdout)
		cmd.Stderr = os.Stderr
	} else {
		cmd.Stderr = &stdout
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	runErr := cmd.Run()
	var res benchResults
	raw, err := os.ReadFile(jsonPath)
	if err == nil {
		err = json.Unmarshal(raw, &res)
	}
	if runErr != nil || err != nil {
		tb.Fatalf("bench.py: %v (results: %v)\n%s\nkernel logs in %s%s", runErr, err, stdout.String(), filepath.Join(dir, "logs"), benchLogTails(dir))
	}
	return stdout.String(), res
}

// benchLogTails is the end of each kernel's log, for a failed run (the
// directory goes with the test).
func benchLogTails(dir string) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	var b strings.Builder
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "\n---- tail of %s ----\n%s", filepath.Base(l), data)
	}
	return b.String()
}

// BenchmarkKernel prints the figures of docs/benchmarks.md, wrapped against direct. One
// iteration takes a few minutes: run it with -benchtime 1x.
func BenchmarkKernel(b *testing.B) {
	benchJupyterPython(b)
	dir := b.TempDir()
	env := benchSetup(b, dir)
	b.ResetTimer()
	var res benchResults
	for i := 0; i < b.N; i++ {
		_, res = benchRun(b, env, dir, false, 15*time.Minute)
	}
	b.StopTimer()
	units := map[string]string{
		"pass": "pass-ratio", "stream": "stream-ratio", "display": "display-ratio", "restart": "restart-ratio",
		"rss_idle": "rss-idle-MB", "rss_after": "rss-after-MB", "rss_peak": "rss-peak-MB", "cpu_idle": "idle-cpu-ms",
		"cpu_stream": "relay-cpu-ms/100MB", "cpu_display": "relay-cpu-ms/10k-display", "wakeups_idle": "idle-wakeups",
	}
	for _, f := range res.Figures {
		if u, ok := units[f.Key]; ok && f.Ratio != nil {
			b.ReportMetric(*f.Ratio, u)
		} else if ok && f.Wrapped != nil {
			b.ReportMetric(*f.Wrapped, u)
		}
		if u, ok := units[f.Key]; ok && f.FloorRatio != nil {
			b.ReportMetric(*f.FloorRatio, strings.TrimSuffix(u, "-ratio")+"-vs-floor")
		}
	}
}

// BenchmarkKernelCurve is BenchmarkKernel on the current stack (ipykernel
// 7.4, jupyter_client 8.10) with transport_encryption "required": the
// supervisor's CurveZMQ doors against ipykernel's own CURVE sockets.
//
//	go test ./cmd/tfgpu-kernel -run '^$' -bench KernelCurve -benchtime 1x -timeout 20m
func BenchmarkKernelCurve(b *testing.B) {
	py := stackPython(b, stackCurrent)
	dir := b.TempDir()
	env := benchSetupWith(b, dir, py, "required")
	for i := 0; i < b.N; i++ {
		benchRun(b, env, dir, false, 15*time.Minute)
	}
}

// restartModes are the containment modes BenchmarkRestartModes compares.
var restartModes = []string{"v2", "v1", "proc"}

// BenchmarkRestartModes prints restart_kernel + wait_for_ready per
// containment mode against the direct kernel, median of 20 each:
//
//	go test ./cmd/tfgpu-kernel -run '^$' -bench RestartModes -benchtime 1x -timeout 20m
func BenchmarkRestartModes(b *testing.B) {
	benchJupyterPython(b)
	dir := b.TempDir()
	env := append(benchSetup(b, dir), "BENCH_RESTART_MODES="+strings.Join(restartModes, ","))
	for i := 0; i < b.N; i++ {
		benchRun(b, env, dir, false, 15*time.Minute)
	}
}

// benchPreload is the module the spare preloads in BenchmarkRestartSpare:
// numpy where the stack has it (Debian's), else jsonschema (today's PyPI
// stack has no numpy; jsonschema is Jupyter's own dependency).
func benchPreload(python string) string {
	if exec.Command(python, "-c", "import numpy").Run() == nil {
		return "numpy"
	}
	return "jsonschema"
}

// BenchmarkRestartSpare prints restart_kernel + wait_for_ready, and that
// plus the first cell's import of the preload module, for the supervisor
// cold, with its spare and with a preloading spare, beside the direct and
// the null kernel, on each Jupyter stack, and the spare's RSS (#25):
//
//	go test ./cmd/tfgpu-kernel -run '^$' -bench RestartSpare -benchtime 1x -timeout 30m
func BenchmarkRestartSpare(b *testing.B) {
	benchJupyterPython(b)
	for _, stack := range []string{stackDebian, stackCurrent} {
		b.Run(stack, func(b *testing.B) {
			py := stackPython(b, stack)
			dir := b.TempDir()
			env := append(benchSetupWith(b, dir, py, ""), "BENCH_SPARE_PRELOAD="+benchPreload(py))
			for i := 0; i < b.N; i++ {
				benchRun(b, env, dir, false, 20*time.Minute)
			}
		})
	}
}

// BenchmarkShutdown prints the shutdown figure of docs/benchmarks.md: shutdown_request
// until the supervisor has killed a 20-process tree, checked NVML (the
// fake, holding nothing) and exited, median of 10:
//
//	go test ./cmd/tfgpu-kernel -run '^$' -bench Shutdown -benchtime 1x
func BenchmarkShutdown(b *testing.B) {
	benchJupyterPython(b)
	dir := b.TempDir()
	f := gputest.New(b, 1, gputest.Full)
	env := append(append(benchSetup(b, dir), f.Env()...), "BENCH_SHUTDOWN=1")
	for i := 0; i < b.N; i++ {
		benchRun(b, env, dir, false, 10*time.Minute)
	}
}

// BenchmarkOps prints the operating figures of docs/benchmarks.md
// (testdata/bench/ops.py): what sampling for --gpu-memory-limit costs a
// supervisor, busy and idle, against one without a limit, and how long
// `tfgpu-kernel ps` takes with 50 supervised kernels, with the fake NVML and
// without NVML:
//
//	go test ./cmd/tfgpu-kernel -run '^$' -bench Ops -benchtime 1x -timeout 20m
func BenchmarkOps(b *testing.B) {
	benchJupyterPython(b)
	dir := b.TempDir()
	f := gputest.New(b, 2, gputest.Full)
	env := append(append(benchSetup(b, dir), f.Env()...),
		"BENCH_TFGPU_BIN="+filepath.Join(dir, "tfgpu-kernel"), "TFGPU_STATE_DIR="+filepath.Join(dir, "state"),
		"TFGPU_BENCH_JSON="+filepath.Join(dir, "ops.json"))
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		cmd := exec.CommandContext(ctx, benchPython, filepath.Join("testdata", "bench", "ops.py"))
		cmd.Env, cmd.Dir = env, "."
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 60 * time.Second
		err := cmd.Run()
		cancel()
		if err != nil {
			b.Fatalf("ops.py: %v (kernel logs in %s)", err, filepath.Join(dir, "logs"))
		}
	}
}
