package wrapper

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/place"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// fakeGPUs is n fake GPUs of 8 GiB each for the supervisors this test
// starts (fakeGPU's, with more devices); mig, when given, is the device to
// put in MIG mode and how many MIG devices it has.
func fakeGPUs(t *testing.T, n int, mig ...int) *gputest.Fake {
	f := gputest.New(t, n, gputest.Full)
	if len(mig) == 2 {
		f.AddMIG(t, mig[0], mig[1])
	}
	for _, kv := range f.Env("FAKE_NVML_TOTAL_MEM=" + strconv.Itoa(8<<30)) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("TFGPU_NVML_LIBRARY", f.Library())
	return f
}

// fakeUUID is the UUID of fake GPU n (gputest).
func fakeUUID(n int) string { return fmt.Sprintf("GPU-fa4e0000-0000-0000-0000-0000000000%02x", n) }

// firstCellTold is the text the supervisor told the harness's first cell
// (connect's), on its stderr.
func firstCellTold(h *harness) string {
	var told string
	for _, c := range h.firstStderr {
		var m struct{ Text string }
		testutil.NoErr(h.t, json.Unmarshal([]byte(c), &m))
		told += m.Text
	}
	return told
}

// wantTold fails the test unless the first cell was told want.
func wantTold(h *harness, want string) {
	h.t.Helper()
	if told := firstCellTold(h); told != want {
		h.t.Fatalf("first cell told:\n%q\nwant\n%q\nlog:\n%s", told, want, h.stderr)
	}
}

// usageReply asks the kernel's usage, as the Lab status item does.
func usageReply(h *harness) map[string]any {
	h.t.Helper()
	h.send(h.control, "usage_request", nil, map[string]any{})
	typ, c := h.reply(h.control, 5*time.Second)
	if typ != "usage_reply" {
		h.t.Fatalf("got %s, want usage_reply", typ)
	}
	return c
}

// usageGPUs are the device indexes of a usage reply's gpus.
func usageGPUs(c map[string]any) []int {
	var out []int
	for _, g := range c["gpus"].([]any) {
		out = append(out, int(g.(map[string]any)["index"].(float64)))
	}
	return out
}

// placementOf reads the record of kernel id and returns its placement.
func placementOf(t *testing.T, id string) *record.Placement {
	t.Helper()
	d, err := record.OpenDir(os.Getenv("TFGPU_STATE_DIR"), false, false)
	testutil.NoErr(t, err)
	defer d.Close()
	st, err := d.StateOf(id)
	testutil.NoErr(t, err)
	return st.Placement
}

// With --gpus auto the kernel gets the GPU with the most free memory, by
// UUID in CUDA_VISIBLE_DEVICES; its first cell says which and why, word
// for word; the record (ps) and the usage reply (the Lab item) show that
// GPU only. Fake NVML, GPUs of 8 GiB, other processes holding memory:
//   - whole GPUs: the explanation of an out-of-memory error, too, shows
//     the chosen GPU only;
//   - a MIG instance: on a GPU in MIG mode the MIG instances are what is
//     chosen from, each with its own free memory: one with more room than
//     a whole GPU is chosen, by its MIG UUID, and the views show its GPU;
//   - none free enough: with no GPU that has the free memory asked for,
//     the kernel still starts, on the GPU with the most, and its first
//     cell says so and who holds the memory (as an out-of-memory error's
//     explanation does);
//   - a CUDA_VISIBLE_DEVICES set before the start (by the user, the
//     kernelspec's env or Slurm) wins: nothing is chosen, the kernel gets
//     it as it was, the first cell is told nothing, and the record says so.
func TestPlacementChoosesTheFreestGPU(t *testing.T) {
	mig1 := "MIG-fa4e0001-0001-0000-0000-000000000000"
	for _, tc := range []struct {
		name            string
		gpus            []int // fakeGPUs' n, then the MIG device and its count
		hold            func(t *testing.T, f *gputest.Fake)
		asked, explicit string // TFGPU_GPUS, and a CUDA_VISIBLE_DEVICES set before
		told, visible   string
		placed          func(p *record.Placement) bool
		usage           []int // the usage reply's gpus; nil: not asked
		then            func(t *testing.T, h *harness)
	}{
		{name: "whole GPUs", gpus: []int{3},
			hold:  func(t *testing.T, f *gputest.Fake) { f.Hold(t, 0, 3072); f.Hold(t, 2, 1024) },
			asked: "auto",
			told: "tfgpu-kernel: --gpus auto chose GPU1 (Fake NVIDIA H200) with 8 GiB free of 8 GiB for this kernel: the most free memory.\n" +
				"  not chosen: GPU2 (Fake NVIDIA H200) with 7 GiB free of 8 GiB\n" +
				"  not chosen: GPU0 (Fake NVIDIA H200) with 5 GiB free of 8 GiB\n" +
				"CUDA_VISIBLE_DEVICES=" + fakeUUID(1) + "\n",
			visible: fakeUUID(1),
			placed: func(p *record.Placement) bool {
				return len(p.GPUs) == 1 && p.GPUs[0].Device == 1 && p.Enough && p.Asked == "auto"
			},
			usage: []int{1},
			then: func(t *testing.T, h *harness) {
				h.holdGPU(1, 1024)
				out := h.cellOutput("error OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.")
				if len(out) != 4 || !strings.Contains(out[2], "GPU1 Fake NVIDIA H200 ("+fakeUUID(1)+"): 8 GiB total, 7 GiB free\n") ||
					strings.Contains(out[2], "GPU0") || strings.Contains(out[2], "GPU2") {
					t.Errorf("out-of-memory explanation of a kernel on GPU1: %q", out)
				}
			}},
		{name: "a MIG instance", gpus: []int{2, 1, 2}, // GPU1: two MIG devices of 4 GiB
			hold:  func(t *testing.T, f *gputest.Fake) { f.Hold(t, 0, 6144); f.Hold(t, 1, 1024, "--mig", "0") }, // GPU0: 2 GiB free
			asked: "auto",
			told: "tfgpu-kernel: --gpus auto chose GPU1 MIG 1 (Fake NVIDIA H200 MIG 3g.4gb) with 4 GiB free of 4 GiB for this kernel: the most free memory.\n" +
				"  not chosen: GPU1 MIG 0 (Fake NVIDIA H200 MIG 3g.4gb) with 3 GiB free of 4 GiB\n" +
				"  not chosen: GPU0 (Fake NVIDIA H200) with 2 GiB free of 8 GiB\n" +
				"CUDA_VISIBLE_DEVICES=" + mig1 + "\n",
			visible: mig1,
			placed: func(p *record.Placement) bool {
				return len(p.GPUs) == 1 && p.GPUs[0].Device == 1 && p.GPUs[0].MIG == 2 && p.GPUs[0].UUID == mig1
			},
			usage: []int{1}}, // GPU1, whose MIG device the kernel has
		{name: "none free enough", gpus: []int{2},
			hold:  func(t *testing.T, f *gputest.Fake) { f.Hold(t, 0, 6144); f.Hold(t, 1, 5120) },
			asked: "auto:min-free=4G",
			told: "tfgpu-kernel: --gpus auto:min-free=4G: no GPU has 4 GiB free; this kernel runs on GPU1 (Fake NVIDIA H200) with 3 GiB free of 8 GiB, the most free there is, and may run out of memory.\n" +
				"  not chosen: GPU0 (Fake NVIDIA H200) with 2 GiB free of 8 GiB\n" +
				"CUDA_VISIBLE_DEVICES=" + fakeUUID(1) + "\n" +
				"Who holds them now, largest first:\n" +
				"GPU1 Fake NVIDIA H200 (" + fakeUUID(1) + "): 8 GiB total, 3 GiB free\n" +
				"  5 GiB      user root\n" +
				"  0 B        this kernel\n",
			visible: fakeUUID(1),
			placed:  func(p *record.Placement) bool { return !p.Enough }},
		{name: "CUDA_VISIBLE_DEVICES set before wins", gpus: []int{2},
			hold:  func(*testing.T, *gputest.Fake) {},
			asked: "auto", explicit: "1",
			visible: "1",
			placed:  func(p *record.Placement) bool { return p.Explicit && len(p.GPUs) == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.hold(t, fakeGPUs(t, tc.gpus[0], tc.gpus[1:]...))
			t.Setenv("TFGPU_GPUS", tc.asked)
			if tc.explicit != "" {
				t.Setenv("CUDA_VISIBLE_DEVICES", tc.explicit)
			}
			h, _ := startExternal(t, "")
			wantTold(h, tc.told)
			out := h.cellOutput("env CUDA_VISIBLE_DEVICES")
			if want := []string{"status:busy", "stream:stdout:" + tc.visible, "status:idle"}; !slices.Equal(out, want) {
				t.Errorf("a cell in the kernel: %q; want its CUDA_VISIBLE_DEVICES, %q, only", out, tc.visible)
			}
			if p := placementOf(t, testKernelID); p == nil || p.Visible != tc.visible || !tc.placed(p) {
				t.Fatalf("record's placement %+v; want %s", p, tc.visible)
			}
			if tc.usage != nil {
				c := usageReply(h)
				placed, _ := c["gpu_placement"].(map[string]any)
				if !slices.Equal(usageGPUs(c), tc.usage) || placed == nil || placed["visible"] != tc.visible {
					t.Fatalf("usage_reply: gpus %v, gpu_placement %v; want %v, %s", c["gpus"], c["gpu_placement"], tc.usage, tc.visible)
				}
			}
			if tc.then != nil {
				tc.then(t, h)
			}
		})
	}
}

// Kernels of the same user started at the same moment, before any of them
// holds GPU memory (NVML shows the same free memory to all), land on
// different GPUs: each subtracts what the others claimed in the placement
// ledger, under the user's placement lock. Four kernels, four equal GPUs.
func TestPlacementConcurrentStartsSpread(t *testing.T) {
	const n = 4
	fakeGPUs(t, n)
	t.Setenv("TFGPU_GPUS", "auto")
	hs := make([]*harness, n)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("5a1e0000-0000-4000-8000-00000000000%d", i)
		path, _ := writeConnOf(t, t.TempDir(), ids[i])
		hs[i], _ = launchExternal(t, path, nil)
	}
	seen := map[string]string{}
	for i, h := range hs {
		h.connect()
		out := h.cellOutput("env CUDA_VISIBLE_DEVICES")
		got := out[len(out)-2]
		uuid, ok := strings.CutPrefix(got, "stream:stdout:")
		if !ok || !strings.HasPrefix(uuid, "GPU-fa4e") {
			t.Fatalf("kernel %d: CUDA_VISIBLE_DEVICES %q; cell %q", i, got, out)
		}
		if other, dup := seen[uuid]; dup {
			t.Errorf("kernels %s and %s both got %s; told %q", other, ids[i], uuid, firstCellTold(h))
		}
		seen[uuid] = ids[i]
	}
	if len(seen) != n {
		t.Fatalf("%d kernels on %d GPUs: %v", n, len(seen), seen)
	}
}

// A fresh kernel after a park (`tfgpu-kernel stop` of a kernel whose
// supervisor stays) is placed again: GPU0, the first kernel's, is fuller
// now, and the fresh kernel gets GPU1 and says so in its first cell.
func TestPlacementAfterPark(t *testing.T) {
	testutil.Integration(t) // its holders are Python
	f := fakeGPUs(t, 2)
	t.Setenv("TFGPU_GPUS", "auto")
	h, cmd := startExternal(t, "")
	if told := firstCellTold(h); !strings.Contains(told, "CUDA_VISIBLE_DEVICES="+fakeUUID(0)+"\n") {
		t.Fatalf("first kernel told %q; want GPU0 (a tie goes to the lower index)", told)
	}
	f.Hold(t, 0, 4096)
	d, err := record.OpenDir(os.Getenv("TFGPU_STATE_DIR"), false, false)
	testutil.NoErr(t, err)
	defer d.Close()
	testutil.NoErr(t, d.WriteOrder(testKernelID, record.Order{By: "operator", Why: "maintenance", At: time.Now()}))
	testutil.NoErr(t, cmd.Process.Signal(parkSignal))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		// Parked, and the park recorded (the phase is written first, as
		// the loop enters it: harness.park waits for the same).
		if st, err := d.StateOf(testKernelID); err == nil && st.Phase == record.PhaseParked && st.Parked != nil {
			if st.Placement != nil {
				t.Errorf("the parked kernel's record still names GPUs: %+v", st.Placement)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not parked within 10 s; log:\n%s", h.stderr)
		}
	}
	out := h.cellOutput("env CUDA_VISIBLE_DEVICES")
	var told string
	for _, o := range out {
		if s, ok := strings.CutPrefix(o, "stream:stderr:"); ok {
			told += s
		}
	}
	if !slices.Contains(out, "stream:stdout:"+fakeUUID(1)) ||
		!strings.Contains(told, "the kernel was stopped by operator (maintenance)") ||
		!strings.Contains(told, "tfgpu-kernel: --gpus auto chose GPU1 (Fake NVIDIA H200) with 8 GiB free of 8 GiB for this kernel") {
		t.Fatalf("the fresh kernel's first cell: %q; want GPU1, told why it stopped and where it runs now", out)
	}
	if p := placementOf(t, testKernelID); p == nil || p.Visible != fakeUUID(1) {
		t.Fatalf("record's placement after the park %+v; want GPU1", p)
	}
}

// Without NVML nothing can be chosen: the kernel starts as without
// --gpus, seeing every GPU, and its first cell says why none was chosen.
func TestPlacementWithoutNVML(t *testing.T) {
	missing := filepath.Join(t.TempDir(), gputest.SOName)
	spec, _, _ := place.Parse("auto")
	h := startHarnessWith(t, func(c *Config) { c.NVMLLibrary, c.GPUs = missing, &spec })
	why := gpu.Connect(missing, "").Err()
	want := "tfgpu-kernel: --gpus auto chose no GPU (" + why.Error() + "); this kernel sees every GPU.\n"
	wantTold(h, want)
	if out := h.cellOutput("env CUDA_VISIBLE_DEVICES"); !slices.Contains(out, "stream:stdout:(unset)") {
		t.Errorf("the kernel's CUDA_VISIBLE_DEVICES: %q; want it unset", out)
	}
	if p := placementOf(t, testKernelID); p == nil || len(p.GPUs) != 0 || p.Why != why.Error() {
		t.Errorf("record's placement %+v", p)
	}
}
