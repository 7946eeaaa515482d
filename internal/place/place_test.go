package place

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
		on   bool
		err  string
	}{
		{in: "", on: false},
		{in: "auto", want: Spec{Count: 1, Text: "auto"}, on: true},
		{in: "auto:2", want: Spec{Count: 2, Text: "auto:2"}, on: true},
		{in: "auto:min-free=20G", want: Spec{Count: 1, MinFree: 20 << 30, Text: "auto:min-free=20G"}, on: true},
		{in: "auto:2,min-free=512Mi", want: Spec{Count: 2, MinFree: 512 << 20, Text: "auto:2,min-free=512Mi"}, on: true},
		{in: "auto:min-free=1.5G,3", want: Spec{Count: 3, MinFree: 3 << 29, Text: "auto:min-free=1.5G,3"}, on: true},
		{in: "auto:16", want: Spec{Count: 16, Text: "auto:16"}, on: true},
		{in: "Auto", err: Usage},
		{in: "automatic", err: Usage},
		{in: "0,1", err: Usage},
		{in: "auto:", err: `"": ` + Usage},
		{in: "auto:0", err: `"0": ` + Usage},
		{in: "auto:17", err: `"17": ` + Usage},
		{in: "auto:2,3", err: `"3": ` + Usage},
		{in: "auto:-1", err: `"-1": ` + Usage},
		{in: "auto:two", err: `"two": ` + Usage},
		{in: "auto:min-free=", err: `bad memory size ""`},
		{in: "auto:min-free=20X", err: `bad memory size "20X"`},
		{in: "auto:min-free=0", err: "min-free=0: want a size above 0"},
		{in: "auto:min-free=1G,min-free=2G", err: "min-free given twice"},
	} {
		got, on, err := Parse(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Parse(%q) = %+v, %v, %v; want an error with %q", tc.in, got, on, err, tc.err)
		case tc.err == "" && (err != nil || on != tc.on || got != tc.want):
			t.Errorf("Parse(%q) = %+v, %v, %v; want %+v, %v", tc.in, got, on, err, tc.want, tc.on)
		}
	}
}

func unit(dev, mig int, freeGiB, totalGiB uint64) gpu.Unit {
	uuid := fmt.Sprintf("GPU-%d", dev)
	if mig != 0 {
		uuid = fmt.Sprintf("MIG-%d-%d", dev, mig-1)
	}
	return gpu.Unit{Device: dev, MIG: mig, UUID: uuid, Name: "H200", Free: freeGiB << 30, Total: totalGiB << 30}
}

func chosen(c Choice) string {
	var s []string
	for _, u := range c.Chosen {
		s = append(s, Label(u.Unit))
	}
	return strings.Join(s, ",")
}

func TestChoose(t *testing.T) {
	four := []gpu.Unit{unit(0, 0, 10, 80), unit(1, 0, 70, 80), unit(2, 0, 70, 80), unit(3, 0, 5, 80)}
	withMIG := []gpu.Unit{unit(0, 0, 30, 80), unit(1, 1, 35, 40), unit(1, 2, 10, 40)}
	for _, tc := range []struct {
		name    string
		units   []gpu.Unit
		spec    Spec
		pending map[string]uint64
		want    string
		enough  bool
	}{
		{"most free, ties by index", four, Spec{Count: 1}, nil, "GPU1", true},
		{"two", four, Spec{Count: 2}, nil, "GPU1,GPU2", true},
		{"claims move the next kernel", four, Spec{Count: 1}, map[string]uint64{"GPU-1": 35 << 30}, "GPU2", true},
		{"claims of both", four, Spec{Count: 1}, map[string]uint64{"GPU-1": 65 << 30, "GPU-2": 62 << 30}, "GPU0", true},
		{"a claim over the free memory is no room", four, Spec{Count: 1}, map[string]uint64{"GPU-1": 90 << 30, "GPU-2": 90 << 30, "GPU-0": 90 << 30}, "GPU3", true},
		{"min-free met", four, Spec{Count: 1, MinFree: 60 << 30}, nil, "GPU1", true},
		{"min-free not met: the best anyway", four, Spec{Count: 1, MinFree: 75 << 30}, nil, "GPU1", false},
		{"min-free met by one of two", four, Spec{Count: 2, MinFree: 20 << 30}, map[string]uint64{"GPU-2": 65 << 30}, "GPU1,GPU0", false},
		{"more than there are", four[:1], Spec{Count: 2}, nil, "GPU0", false},
		{"a MIG instance with more room than a GPU", withMIG, Spec{Count: 1}, nil, "GPU1 MIG 0", true},
		{"no MIG instances for two", withMIG, Spec{Count: 2}, nil, "GPU0", false},
		{"nothing to choose from", nil, Spec{Count: 1}, nil, "", false},
	} {
		c := Choose(tc.units, tc.spec, tc.pending)
		if got := chosen(c); got != tc.want || c.Enough != tc.enough {
			t.Errorf("%s: chose %q, enough %v; want %q, %v", tc.name, got, c.Enough, tc.want, tc.enough)
		}
		if len(c.Chosen)+len(c.Others) != len(tc.units) && tc.spec.Count == 1 {
			t.Errorf("%s: %d chosen and %d others of %d units", tc.name, len(c.Chosen), len(c.Others), len(tc.units))
		}
	}
}

// Kernels started one after another before any allocates: each one's claim
// sends the next elsewhere, and with more kernels than GPUs they share
// them evenly.
func TestClaimsSpreadKernels(t *testing.T) {
	units := []gpu.Unit{unit(0, 0, 80, 80), unit(1, 0, 80, 80), unit(2, 0, 80, 80)}
	pending := map[string]uint64{}
	count := map[string]int{}
	for range 6 {
		c := Choose(units, Spec{Count: 1}, pending)
		pending[c.Chosen[0].UUID] += Claim(c.Chosen[0], c.Spec)
		count[Label(c.Chosen[0].Unit)]++
	}
	for _, l := range []string{"GPU0", "GPU1", "GPU2"} {
		if count[l] != 2 {
			t.Errorf("6 kernels on 3 GPUs: %v; want 2 each", count)
		}
	}
	if got := Claim(Candidate{Unit: unit(0, 0, 10, 80)}, Spec{MinFree: 20 << 30}); got != 20<<30 {
		t.Errorf("claim with min-free 20 GiB on 10 GiB of room: %d; want the minimum asked for", got)
	}
}

func TestText(t *testing.T) {
	c := Choose([]gpu.Unit{unit(0, 0, 10, 80), unit(1, 1, 35, 40)}, Spec{Count: 1, Text: "auto"}, map[string]uint64{"GPU-0": 4 << 30})
	want := "tfgpu-kernel: --gpus auto chose GPU1 MIG 0 (H200) with 35 GiB free of 40 GiB for this kernel: the most free memory.\n" +
		"  not chosen: GPU0 (H200) with 10 GiB free of 80 GiB, 4 GiB of it claimed by your kernels starting now\n" +
		"CUDA_VISIBLE_DEVICES=MIG-1-0\n"
	if got := c.Text(); got != want {
		t.Errorf("Text:\n%q\nwant\n%q", got, want)
	}
	c = Choose([]gpu.Unit{unit(0, 0, 10, 80)}, Spec{Count: 2, Text: "auto:2"}, nil)
	if got := c.Text(); !strings.HasPrefix(got, "tfgpu-kernel: --gpus auto:2: only 1 GPU(s) to choose from; this kernel runs on GPU0 (H200)") {
		t.Errorf("Text with too few: %q", got)
	}
	c = Choose(nil, Spec{Count: 1, Text: "auto"}, nil)
	if got := c.Text(); got != "tfgpu-kernel: --gpus auto: NVML lists no GPU to choose from; the kernel sees what CUDA shows it.\n" {
		t.Errorf("Text with nothing: %q", got)
	}
	bad := Choose([]gpu.Unit{{Device: 0, UUID: "GPU-0", Name: "H200\x1b[2J\nx"}}, Spec{Count: 1}, nil)
	if got := bad.Text(); strings.ContainsAny(got[:strings.Index(got, "\n")], "\x1b") {
		t.Errorf("a device name's control characters reached the cell: %q", got)
	}
}

// FuzzParse: any --gpus value is refused with an error that names no more
// than a line, or gives a setting within bounds that reads back the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "auto", "auto:2", "auto:min-free=20G", "auto:2,min-free=1.5G", "auto:0", "auto:\x1b[2J"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, on, err := Parse(s)
		switch {
		case err != nil:
			if on || strings.Contains(err.Error(), "\n") && !strings.Contains(s, "\n") {
				t.Fatalf("Parse(%q): %v, on %v", s, err, on)
			}
		case !on:
			if s != "" {
				t.Fatalf("Parse(%q) is off", s)
			}
		case spec.Count < 1 || spec.Count > MaxCount || spec.MinFree < 0 || spec.String() != s:
			t.Fatalf("Parse(%q) = %+v", s, spec)
		}
	})
}
