package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// Label values are what users named their notebooks: quotes, backslashes,
// newlines and bytes that are not UTF-8 still make text Prometheus parses,
// with the name intact where it can be.
func TestPrometheusLabelsSurviveAnyNotebookName(t *testing.T) {
	now := time.Now()
	last := now.Add(-90 * time.Second)
	names := []string{`a "quoted" name.ipynb`, `C:\\dir\\x.ipynb`, "two\nlines.ipynb", "bad \xff utf8.ipynb", "}{,=\"", ""}
	var rows []record.KernelStatus
	for i, n := range names {
		rows = append(rows, record.KernelStatus{KernelID: "k" + string(rune('0'+i)), Session: n, User: "alice",
			State: record.PhaseRunning, ExecutionState: record.ExecIdle, LastActivity: &last, PIDs: []int{1, 2},
			GPU: []record.GPUUse{{Index: 0, UUID: "GPU-x", UsedBytes: 1 << 30}, {Index: 1, UsedBytes: -1}}})
	}
	var b bytes.Buffer
	if err := writePrometheus(&b, rows, "", now); err != nil {
		t.Fatal(err)
	}
	fams := parseProm(t, b.String())
	for i, n := range names {
		want := strings.ToValidUTF8(n, "\uFFFD")
		id := "k" + string(rune('0'+i))
		if v, ok := promValue(fams, "tfgpu_kernel_idle_seconds", map[string]string{"kernel_id": id, "notebook": want, "user": "alice"}); !ok || v != 90 {
			t.Errorf("notebook %q: idle seconds %v (found %v)", n, v, ok)
		}
		if v, ok := promValue(fams, "tfgpu_kernel_gpu_memory_bytes", map[string]string{"kernel_id": id, "gpu": "0", "uuid": "GPU-x"}); !ok || v != 1<<30 {
			t.Errorf("notebook %q: GPU0 %v (found %v)", n, v, ok)
		}
		if _, ok := promValue(fams, "tfgpu_kernel_gpu_memory_bytes", map[string]string{"kernel_id": id, "gpu": "1"}); ok {
			t.Errorf("notebook %q: a figure NVML did not give (-1) was exported", n)
		}
	}
	b.Reset()
	if err := writePrometheus(&b, nil, "no NVIDIA driver", now); err != nil {
		t.Fatal(err)
	}
	if v, ok := promValue(parseProm(t, b.String()), "tfgpu_gpu_memory_attributed", nil); !ok || v != 0 {
		t.Errorf("without NVML: tfgpu_gpu_memory_attributed %v (found %v)\n%s", v, ok, b.String())
	}
}

// stop's selections are one of an id, --all, or --idle-for; anything else
// is a usage error (exit 2) that stops nothing.
func TestStopUsage(t *testing.T) {
	bin := buildInstallTestBinary(t)
	for _, args := range [][]string{
		{"stop"}, {"stop", "--holding-gpu"}, {"stop", "--idle-for", "1h", "abc"}, {"stop", "--idle-for", "1h", "--all"},
		{"stop", "--idle-for", "-5m"}, {"stop", "--idle-for", "soon"}, {"stop", "--all", "abc"},
	} {
		env := append(os.Environ(), "TFGPU_STATE_DIR="+t.TempDir())
		if r := runInstallBin(t, env, bin, args...); r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") > 2 {
			t.Errorf("%v: exit %d, want 2 with a short error:\n%s", args, r.code, r.stderr)
		}
	}
}
