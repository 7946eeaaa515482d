//go:build linux && e2e

// The README's figure (docs/img/gpu-restart.svg): GPU memory over time
// across Jupyter's Restart, Debian's stock ipykernel kernelspec beside the
// tfgpu one, measured with the fake NVML by testdata/e2e/figure.py and
// drawn by docs/img/gpu-restart.py; docs/img/gpu-restart.sh does both.
// The test asserts what the figure shows, so a figure that no longer
// holds fails the suite instead of staying in the README.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// figure.py's sizes (KERNEL_MIB, WORKER_MIB) and the driver's release
// delay: long enough to see in the figure, short enough to keep the test
// short.
const (
	figureKernelMiB = 4096
	figureWorkerMiB = 2048
	figureReleaseMS = 500
)

// A sample row of figure.py: seconds, then MiB per role ("columns").
const (
	figT = iota
	figKernel
	figWorker
	figNewKernel
	figOther
)

// gpuFigure is docs/img/gpu-restart.json, what docs/img/gpu-restart.py draws.
type gpuFigure struct {
	Measured  string      `json:"measured"`
	How       string      `json:"how"`
	CPUs      int         `json:"cpus"`
	ReleaseMS int         `json:"release_ms"`
	KernelMiB int         `json:"kernel_mib"`
	WorkerMiB int         `json:"worker_mib"`
	Runs      []figureRun `json:"runs"`
}

// figureRun is one kernelspec's run: figure.py's facts, named.
type figureRun struct {
	Name             string             `json:"name"`
	Label            string             `json:"label"`
	Kernel           string             `json:"kernel"`
	JupyterClient    string             `json:"jupyter_client"`
	IPyKernel        string             `json:"ipykernel"`
	Columns          []string           `json:"columns"`
	Samples          [][]float64        `json:"samples"`
	Marks            map[string]float64 `json:"marks"`
	Pids             map[string]int     `json:"pids"`
	OtherPids        []int              `json:"other_pids"`
	WorkerAliveAtEnd bool               `json:"worker_alive_at_end"`
}

// TestE2EFigureGPURestart runs figure.py on the stock "python3" kernelspec
// (found by Debian's jupyter_client itself) and on "tfgpu", each with a
// fake NVML of its own releasing a dead holder's memory 500 ms late, and
// checks the story the figure tells: both start from a kernel holding
// 4 GiB and an escaped worker holding 2 GiB; after the stock restart the
// worker still holds its 2 GiB, under the new kernel's 4 GiB; after the
// tfgpu restart NVML lists nothing of the old tree from the moment the new
// kernel is ready, and the new kernel's 4 GiB is all there is. The samples
// go to TFGPU_FIGURE_OUT/gpu-restart.json when that is set (and the test
// passed), and to the test's temporary directory.
func TestE2EFigureGPURestart(t *testing.T) {
	s := e2eSetup(t)
	out := os.Getenv("TFGPU_FIGURE_OUT")
	if out != "" && !filepath.IsAbs(out) {
		t.Fatalf("TFGPU_FIGURE_OUT=%s: want an absolute path (go test runs in the package's directory)", out)
	}
	fig := gpuFigure{
		Measured:  time.Now().UTC().Format("2006-01-02"),
		How:       "TestE2EFigureGPURestart (cmd/tfgpu-kernel/testdata/e2e/figure.py), fake NVML, Debian's Jupyter stack",
		CPUs:      runtime.NumCPU(),
		ReleaseMS: figureReleaseMS,
		KernelMiB: figureKernelMiB,
		WorkerMiB: figureWorkerMiB,
	}
	for _, k := range []struct {
		name, label, kernel string
	}{
		{"stock", "stock ipykernel", "python3"},
		{"tfgpu", "TF-GPU (clean restart)", "tfgpu"},
	} {
		t.Run(k.name, func(t *testing.T) {
			f := gputest.New(t, 2, gputest.Full)
			gs := *s
			// Survivors fail both runs: figure.py kills the worker the
			// stock kernel leaves, so anything else alive is this test's.
			gs.kernel, gs.wrapped = k.kernel, true
			gs.env = append(append(append([]string{}, s.env...), f.Env(fmt.Sprintf("FAKE_NVML_RELEASE_MS=%d", figureReleaseMS))...),
				"E2E_KERNEL="+k.kernel, "E2E_WRAPPED="+map[bool]string{true: "1", false: "0"}[k.kernel == "tfgpu"])
			res := gs.scenario(t, 120*time.Second, "figure.py")
			run, err := figureRunOf(res.Facts)
			testutil.NoErr(t, err)
			run.Name, run.Label = k.name, k.label
			checkFigure(t, run)
			fig.Runs = append(fig.Runs, run)
		})
	}
	if len(fig.Runs) != 2 {
		return
	}
	data, err := json.MarshalIndent(fig, "", "  ")
	testutil.NoErr(t, err)
	// One line per sample: the file is committed, and diffs of it should read.
	data = regexp.MustCompile(`\[[^\[\]{}"]*\]`).ReplaceAllFunc(data, func(b []byte) []byte {
		return []byte(strings.Join(strings.Fields(string(b)), ""))
	})
	data = append(data, '\n')
	dirs := []string{t.TempDir()}
	if out != "" && !t.Failed() {
		dirs = append(dirs, out)
	}
	for _, dir := range dirs {
		testutil.NoErr(t, os.WriteFile(filepath.Join(dir, "gpu-restart.json"), data, 0o644))
	}
	t.Logf("samples written to %s", strings.Join(dirs, ", "))
}

// figureRunOf decodes figure.py's facts.
func figureRunOf(facts map[string]any) (figureRun, error) {
	var run figureRun
	b, err := json.Marshal(facts)
	if err == nil {
		err = json.Unmarshal(b, &run)
	}
	if err != nil {
		return run, fmt.Errorf("figure.py's facts: %w", err)
	}
	want := []string{"t", "kernel_mib", "worker_mib", "new_kernel_mib", "other_mib"}
	if strings.Join(run.Columns, " ") != strings.Join(want, " ") {
		return run, fmt.Errorf("figure.py's columns are %v, want %v", run.Columns, want)
	}
	for _, m := range []string{"cell_done", "restart", "restart_returned", "ready", "rerun", "rerun_done", "end"} {
		if _, ok := run.Marks[m]; !ok {
			return run, fmt.Errorf("figure.py marked no %q: %v", m, run.Marks)
		}
	}
	if len(run.Samples) == 0 {
		return run, fmt.Errorf("figure.py took no samples")
	}
	return run, nil
}

// checkFigure asserts what the figure shows of run, and logs its figures.
func checkFigure(t *testing.T, run figureRun) {
	t.Helper()
	total := func(r []float64) float64 { return r[figKernel] + r[figWorker] + r[figNewKernel] + r[figOther] }
	// at is the first sample taken at or after mark: what NVML listed then.
	at := func(mark string) []float64 {
		for _, r := range run.Samples {
			if r[figT] >= run.Marks[mark] {
				return r
			}
		}
		return run.Samples[len(run.Samples)-1]
	}
	var peak, readyToRerun []float64
	for _, r := range run.Samples {
		if r[figOther] != 0 {
			t.Errorf("%s: at %.2fs NVML lists %v MiB of processes that are not the test's (pids %v)", run.Name, r[figT], r[figOther], run.OtherPids)
		}
		if r[figT] < run.Marks["restart"] && (peak == nil || total(r) > total(peak)) {
			peak = r
		}
		if r[figT] >= run.Marks["ready"] && r[figT] < run.Marks["rerun"] {
			readyToRerun = append(readyToRerun, total(r))
		}
	}
	last := run.Samples[len(run.Samples)-1]
	most := 0.0 // held between ready and the re-run
	for _, m := range readyToRerun {
		most = max(most, m)
	}
	t.Logf("%s (%s, jupyter_client %s, ipykernel %s): %d samples over %.1fs; before Restart %v MiB (kernel %v, worker %v); "+
		"at restart_kernel's return %v MiB; Restart to ready %.2fs; from ready to the re-run at most %v MiB; "+
		"at the end %v MiB (worker %v, new kernel %v); worker alive at the end: %v",
		run.Name, run.Kernel, run.JupyterClient, run.IPyKernel, len(run.Samples), last[figT],
		total(peak), peak[figKernel], peak[figWorker], total(at("restart_returned")),
		run.Marks["ready"]-run.Marks["restart"], most, total(last), last[figWorker], last[figNewKernel], run.WorkerAliveAtEnd)

	if peak[figKernel] != figureKernelMiB || peak[figWorker] != figureWorkerMiB {
		t.Errorf("%s: before the Restart NVML never listed the kernel's %d MiB and the worker's %d MiB together: at most %v",
			run.Name, figureKernelMiB, figureWorkerMiB, peak)
	}
	if last[figNewKernel] != figureKernelMiB || last[figKernel] != 0 {
		t.Errorf("%s: at the end NVML lists %v, want the new kernel's %d MiB and nothing of the old kernel", run.Name, last, figureKernelMiB)
	}
	if len(readyToRerun) == 0 {
		t.Errorf("%s: no sample between the new kernel's ready and the re-run (marks %v)", run.Name, run.Marks)
	}
	if run.Kernel == "tfgpu" {
		// The supervisor confirms the release before it starts the new kernel.
		for _, r := range run.Samples {
			if r[figT] >= run.Marks["ready"] && r[figKernel]+r[figWorker] != 0 {
				t.Errorf("tfgpu: at %.2fs, after the new kernel was ready (%.2fs), NVML lists the old tree: %v", r[figT], run.Marks["ready"], r)
			}
		}
		if most != 0 {
			t.Errorf("tfgpu: between the new kernel's ready and the re-run NVML lists up to %v MiB, want 0", most)
		}
		if total(last) != figureKernelMiB || run.WorkerAliveAtEnd {
			t.Errorf("tfgpu: at the end NVML lists %v MiB (worker alive: %v), want only the new kernel's %d MiB",
				total(last), run.WorkerAliveAtEnd, figureKernelMiB)
		}
		return
	}
	// The stock kernel leaves the setsid'd worker, and its memory, behind.
	for _, r := range run.Samples {
		if r[figT] >= run.Marks["ready"] && r[figWorker] != figureWorkerMiB {
			t.Errorf("stock: at %.2fs, after the new kernel was ready, NVML lists %v MiB of the worker, want its %d MiB still held",
				r[figT], r[figWorker], figureWorkerMiB)
		}
	}
	if total(last) != figureKernelMiB+figureWorkerMiB || !run.WorkerAliveAtEnd {
		t.Errorf("stock: at the end NVML lists %v MiB (worker alive: %v), want the worker's %d MiB under the new kernel's %d MiB",
			total(last), run.WorkerAliveAtEnd, figureWorkerMiB, figureKernelMiB)
	}
}
