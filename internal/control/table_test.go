package control

import (
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// ps's table says under the rows which GPUs --gpus auto gave each kernel,
// or that a CUDA_VISIBLE_DEVICES set before the start won.
func TestTablePlacementLines(t *testing.T) {
	at := time.Date(2026, 12, 6, 14, 3, 0, 0, time.Local)
	rows := []record.KernelStatus{
		{KernelID: "5b2c1e7a-0000", State: "running", Started: at, Placement: &record.Placement{Asked: "auto:2", Enough: true, At: at,
			GPUs: []gpu.Unit{{Device: 1, UUID: "GPU-1", Free: 140 << 30, Total: 141 << 30}, {Device: 3, MIG: 2, UUID: "MIG-3-1", Free: 10 << 30, Total: 20 << 30}}}},
		{KernelID: "6c3d2f8b-0000", State: "running", Started: at, Placement: &record.Placement{Asked: "auto:min-free=40G", At: at,
			GPUs: []gpu.Unit{{Device: 0, UUID: "GPU-0", Free: 30 << 30, Total: 141 << 30}}}},
		{KernelID: "7d4e3a9c-0000", State: "running", Started: at, Placement: &record.Placement{Asked: "auto", Explicit: true, Visible: "0,1", At: at}},
		{KernelID: "8e5f4b0d-0000", State: "running", Started: at, Placement: &record.Placement{Asked: "auto", At: at, Why: "no NVIDIA driver"}},
		{KernelID: "9f6a5c1e-0000", State: "running", Started: at},
	}
	var b strings.Builder
	Table(&b, rows, "", at)
	for _, want := range []string{
		"\n5b2c1e7a on GPU1, GPU3 MIG 1 (--gpus auto:2 at 14:03: 140 GiB free of 141 GiB, 10 GiB free of 20 GiB)\n",
		"\n6c3d2f8b on GPU0 (--gpus auto:min-free=40G at 14:03: 30 GiB free of 141 GiB): not as much free as asked\n",
		"\n7d4e3a9c on CUDA_VISIBLE_DEVICES=0,1, set before it started (--gpus auto chose nothing)\n",
		"\n8e5f4b0d on every GPU: --gpus auto chose none (no NVIDIA driver)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ps table lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "9f6a5c1e on") {
		t.Errorf("a kernel without --gpus auto has a placement line:\n%s", b.String())
	}
}
