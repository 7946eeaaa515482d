package control

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
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
	if err := Prometheus(&b, rows, "", now); err != nil {
		t.Fatal(err)
	}
	fams := testutil.ParseProm(t, b.String())
	for i, n := range names {
		want := strings.ToValidUTF8(n, "\uFFFD")
		id := "k" + string(rune('0'+i))
		if v, ok := testutil.PromValue(fams, "tfgpu_kernel_idle_seconds", map[string]string{"kernel_id": id, "notebook": want, "user": "alice"}); !ok || v != 90 {
			t.Errorf("notebook %q: idle seconds %v (found %v)", n, v, ok)
		}
		if v, ok := testutil.PromValue(fams, "tfgpu_kernel_gpu_memory_bytes", map[string]string{"kernel_id": id, "gpu": "0", "uuid": "GPU-x"}); !ok || v != 1<<30 {
			t.Errorf("notebook %q: GPU0 %v (found %v)", n, v, ok)
		}
		if _, ok := testutil.PromValue(fams, "tfgpu_kernel_gpu_memory_bytes", map[string]string{"kernel_id": id, "gpu": "1"}); ok {
			t.Errorf("notebook %q: a figure NVML did not give (-1) was exported", n)
		}
	}
	// Each process once, by its role: the spare as the spare.
	b.Reset()
	roles := []record.KernelStatus{{KernelID: "kr", User: "alice", State: record.PhaseRunning, PIDs: []int{20, 21}, RSSBytes: 300,
		Processes: []record.Member{{PID: 9, Role: record.RoleStub, RSSBytes: 10}, {PID: 10, Role: record.RoleSupervisor, RSSBytes: 11},
			{PID: 20, Role: record.RoleKernel, RSSBytes: 200}, {PID: 21, Role: record.RoleTree, RSSBytes: 100},
			{PID: 30, Role: record.RoleStandby, RSSBytes: 12}, {PID: 31, Role: record.RoleSpare, RSSBytes: 70}}}}
	if err := Prometheus(&b, roles, "", now); err != nil {
		t.Fatal(err)
	}
	fams = testutil.ParseProm(t, b.String())
	for role, want := range map[string][2]float64{"stub": {1, 10}, "supervisor": {1, 11}, "kernel": {1, 200}, "tree": {1, 100}, "standby": {1, 12}, "spare": {1, 70}} {
		l := map[string]string{"kernel_id": "kr", "role": role}
		n, ok1 := testutil.PromValue(fams, "tfgpu_kernel_role_processes", l)
		rss, ok2 := testutil.PromValue(fams, "tfgpu_kernel_role_rss_bytes", l)
		if !ok1 || !ok2 || n != want[0] || rss != want[1] {
			t.Errorf("role %s: %v processes, %v bytes; want %v", role, n, rss, want)
		}
	}
	if v, ok := testutil.PromValue(fams, "tfgpu_kernel_processes", map[string]string{"kernel_id": "kr"}); !ok || v != 2 {
		t.Errorf("tfgpu_kernel_processes counts %v, want the tree's 2", v)
	}
	b.Reset()
	if err := Prometheus(&b, nil, "no NVIDIA driver", now); err != nil {
		t.Fatal(err)
	}
	if v, ok := testutil.PromValue(testutil.ParseProm(t, b.String()), "tfgpu_gpu_memory_attributed", nil); !ok || v != 0 {
		t.Errorf("without NVML: tfgpu_gpu_memory_attributed %v (found %v)\n%s", v, ok, b.String())
	}
}

// What --gpus auto chose is a sample per GPU, before the kernel holds
// anything there; a CUDA_VISIBLE_DEVICES set before the start chose none.
func TestPrometheusPlacement(t *testing.T) {
	rows := []record.KernelStatus{
		{KernelID: "auto", User: "alice", Placement: &record.Placement{Asked: "auto:2", GPUs: []gpu.Unit{{Device: 1, UUID: "GPU-b"}, {Device: 3, MIG: 2, UUID: "MIG-d"}}}},
		{KernelID: "set", User: "alice", Placement: &record.Placement{Asked: "auto", Explicit: true, Visible: "GPU-a", GPUs: []gpu.Unit{{UUID: "GPU-a"}}}},
		{KernelID: "none", User: "alice"},
	}
	var b bytes.Buffer
	testutil.NoErr(t, Prometheus(&b, rows, "", time.Now()))
	fams := testutil.ParseProm(t, b.String())
	for _, want := range []map[string]string{{"kernel_id": "auto", "gpu": "1", "uuid": "GPU-b"}, {"kernel_id": "auto", "gpu": "3", "uuid": "MIG-d"}} {
		if v, ok := testutil.PromValue(fams, "tfgpu_kernel_gpu_placement", want); !ok || v != 1 {
			t.Errorf("%v: %v (found %v)\n%s", want, v, ok, b.String())
		}
	}
	if n := len(fams["tfgpu_kernel_gpu_placement"].GetMetric()); n != 2 {
		t.Errorf("%d placement samples, want the 2 chosen\n%s", n, b.String())
	}
}
