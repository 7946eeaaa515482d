//go:build linux && e2e

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Issue 14, idle holders and metrics: testdata/e2e/gpu.py idle on both
// stacks, three real kernels (an idle GPU holder with escaped holders, a
// busy one, an idle one holding nothing). The scenario checks ps --json
// and stop --idle-for [--holding-gpu]; here the `ps --format prometheus`
// it wrote while all three ran is parsed with Prometheus' own text parser
// and its figures compared with what ps --json said.
func TestE2EIdleStop(t *testing.T) {
	eachStack(t, func(t *testing.T, stack string) {
		s := e2eSetupStack(t, stack)
		if !s.wrapped {
			t.Skip("ps and stop are the supervisor's")
		}
		f := gputest.New(t, 2, gputest.Full)
		metrics := filepath.Join(t.TempDir(), "tfgpu.prom")
		gs := *s
		gs.env = append(append(append([]string{}, s.env...), f.Env()...),
			"E2E_TFGPU_BIN="+s.bin, "E2E_NVML_DIR="+f.LibDir, "E2E_HOLDER_DIR="+f.HolderDir,
			"E2E_METRICS="+metrics)
		res := gs.scenario(t, 150*time.Second, "gpu.py", "idle")
		text, err := os.ReadFile(metrics)
		testutil.NoErr(t, err)
		fams := testutil.ParseProm(t, string(text))
		rows, _ := res.Facts["ps_rows"].(map[string]any)
		if len(rows) != 3 {
			t.Fatalf("facts lack the three ps rows: %v", res.Facts["ps_rows"])
		}
		for name, r := range rows {
			row := r.(map[string]any)
			id := row["kernel_id"].(string)
			want := map[string]float64{
				"tfgpu_kernel_processes": float64(len(row["pids"].([]any))),
				"tfgpu_kernel_busy":      map[bool]float64{true: 1, false: 0}[name == "busy"],
			}
			for metric, v := range want {
				if got, ok := testutil.PromValue(fams, metric, map[string]string{"kernel_id": id}); !ok || got != v {
					t.Errorf("%s kernel: %s = %v (found %v), want %v", name, metric, got, ok, v)
				}
			}
			if got, ok := testutil.PromValue(fams, "tfgpu_kernel_rss_bytes", map[string]string{"kernel_id": id}); !ok || got < 10<<20 {
				t.Errorf("%s kernel: rss %v", name, got)
			}
			idle, ok := testutil.PromValue(fams, "tfgpu_kernel_idle_seconds", map[string]string{"kernel_id": id})
			if !ok || (name == "busy") != (idle == 0) || (name != "busy" && idle < 1) {
				t.Errorf("%s kernel: idle seconds %v (found %v)", name, idle, ok)
			}
			if _, ok := testutil.PromValue(fams, "tfgpu_kernel_info", map[string]string{"kernel_id": id, "user": "root",
				"state": "running", "execution_state": map[bool]string{true: "busy", false: "idle"}[name == "busy"]}); !ok {
				t.Errorf("%s kernel: no tfgpu_kernel_info with its labels", name)
			}
			for _, g := range row["gpu"].([]any) {
				g := g.(map[string]any)
				dev := strconv.Itoa(int(g["index"].(float64)))
				got, ok := testutil.PromValue(fams, "tfgpu_kernel_gpu_memory_bytes", map[string]string{"kernel_id": id, "gpu": dev})
				if !ok || got != g["used_bytes"].(float64) {
					t.Errorf("%s kernel: GPU%s memory %v (found %v), ps --json says %v", name, dev, got, ok, g["used_bytes"])
				}
			}
		}
		if v, ok := testutil.PromValue(fams, "tfgpu_gpu_memory_attributed", nil); !ok || v != 1 {
			t.Errorf("tfgpu_gpu_memory_attributed = %v (found %v), want 1", v, ok)
		}
	})
}
