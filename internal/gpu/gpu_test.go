package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// A test that loads an NVML library does it in a child process (the test
// binary with GPU_TEST_PROBE set): one process can bind go-nvml to one
// library file only, initialised with one set of the fake's knobs.
func TestMain(m *testing.M) {
	if os.Getenv("GPU_TEST_PROBE") != "" {
		os.Exit(probe())
	}
	testutil.Hermetic(nil, testutil.HostNVML()) // a real driver must not answer for "no driver"
	os.Exit(m.Run())
}

// probeResult is what a child process saw through Open.
type probeResult struct {
	Err     string
	Driver  string
	Devices []Device
	Holders []Holder
	Units   []Unit
	Notes   []string
	Persist []bool
}

func probe() int {
	var r probeResult
	n, err := Open(os.Getenv("GPU_TEST_LIB"), os.Getenv("GPU_TEST_VISIBLE"))
	if err != nil {
		r.Err = err.Error()
	} else {
		r.Driver, r.Devices, r.Notes = n.Driver, n.Devices(), n.Notes
		if r.Holders, err = n.Holders(); err != nil {
			r.Err = err.Error()
		}
		if r.Units, err = n.Units(); err != nil {
			r.Err = err.Error()
		}
		for _, d := range n.Devices() {
			p, _ := n.Persistence(d)
			r.Persist = append(r.Persist, p)
		}
		n.Close()
		if _, err := n.Holders(); err == nil {
			r.Err = "Holders after Close did not fail"
		}
		if _, err := n.Units(); err == nil {
			r.Err = "Units after Close did not fail"
		}
	}
	json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

// look runs Open in a child process with env.
func look(t *testing.T, env ...string) probeResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "GPU_TEST_PROBE=1"), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	var r probeResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	return r
}

func TestOpenListsHoldersOfTheWatchedDevices(t *testing.T) {
	f := gputest.New(t, 3, gputest.Full)
	a := f.Hold(t, 0, 2048)
	b := f.Hold(t, 2, 512)
	r := look(t, f.Env()...)
	if r.Err != "" || r.Driver != "999.99-fake" || len(r.Devices) != 3 || len(r.Notes) != 0 {
		t.Fatalf("Open: %+v", r)
	}
	want := []Holder{
		{Device: 0, UUID: r.Devices[0].UUID, PID: a.Process.Pid, Bytes: 2048 << 20},
		{Device: 2, UUID: r.Devices[2].UUID, PID: b.Process.Pid, Bytes: 512 << 20},
	}
	if fmt.Sprint(r.Holders) != fmt.Sprint(want) {
		t.Fatalf("holders %+v, want %+v", r.Holders, want)
	}
	if r.Devices[1].Total != 141<<30 || !strings.HasPrefix(r.Devices[1].UUID, "GPU-fa4e") || r.Devices[1].Name != "Fake NVIDIA H200" {
		t.Fatalf("device 1: %+v", r.Devices[1])
	}
	if len(r.Persist) != 3 || !r.Persist[0] {
		t.Fatalf("persistence %v", r.Persist)
	}

	// CUDA_VISIBLE_DEVICES by UUID (without "GPU-", a prefix) and index.
	vis := strings.TrimPrefix(r.Devices[2].UUID, "GPU-")
	r = look(t, append(f.Env(), "GPU_TEST_VISIBLE="+vis+",1")...)
	if len(r.Devices) != 2 || r.Devices[0].Index != 2 || r.Devices[1].Index != 1 {
		t.Fatalf("visible %q: devices %+v", vis, r.Devices)
	}
	if len(r.Holders) != 1 || r.Holders[0].PID != b.Process.Pid {
		t.Fatalf("visible %q: holders %+v", vis, r.Holders)
	}
}

// Drivers that cannot answer: Open says what in one line, or the figures
// say unknown; nothing crashes.
func TestOpenDegrades(t *testing.T) {
	f := gputest.New(t, 1, gputest.Full)
	t.Run("no library", func(t *testing.T) {
		if len(testutil.HostNVML()) > 0 {
			testutil.RequireHermetic(t) // the host's driver, hidden
		}
		r := look(t, "LD_LIBRARY_PATH="+t.TempDir())
		if !strings.Contains(r.Err, "no NVIDIA driver: cannot load libnvidia-ml.so.1") {
			t.Fatalf("err %q", r.Err)
		}
	})
	t.Run("library path", func(t *testing.T) {
		r := look(t, append(f.Env(), "LD_LIBRARY_PATH=", "GPU_TEST_LIB="+f.Library())...)
		if r.Err != "" || len(r.Devices) != 1 {
			t.Fatalf("Open(%s): %+v", f.Library(), r)
		}
	})
	t.Run("driver not loaded", func(t *testing.T) {
		r := look(t, f.Env("FAKE_NVML_INIT_FAIL=9")...)
		if !strings.Contains(r.Err, "no NVIDIA driver: the kernel module is not loaded") {
			t.Fatalf("err %q", r.Err)
		}
	})
	t.Run("init failure", func(t *testing.T) {
		r := look(t, f.Env("FAKE_NVML_INIT_FAIL=999")...)
		if !strings.HasPrefix(r.Err, "NVML init failed: ") {
			t.Fatalf("err %q", r.Err)
		}
	})
	t.Run("memory not available", func(t *testing.T) {
		h := f.Hold(t, 0, 100)
		r := look(t, f.Env("FAKE_NVML_MEM_UNAVAILABLE=1")...)
		if r.Err != "" || len(r.Holders) != 1 || r.Holders[0].PID != h.Process.Pid || r.Holders[0].Bytes != -1 {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("no _v3", func(t *testing.T) {
		old := gputest.New(t, 1, gputest.NoV3)
		h := old.Hold(t, 0, 100)
		r := look(t, old.Env()...)
		if r.Err != "" || len(r.Holders) != 1 || r.Holders[0].PID != h.Process.Pid || len(r.Notes) != 1 {
			t.Fatalf("%+v", r)
		}
		if calls := strings.Join(old.Calls(t), "\n"); !strings.Contains(calls, "ComputeRunningProcesses_v2") || strings.Contains(calls, "_v3") {
			t.Fatalf("calls:\n%s", calls)
		}
	})
}

// Units: whole GPUs, and the MIG devices of a GPU in MIG mode, each with
// its free memory; the MIG holder is listed on its parent GPU.
func TestUnits(t *testing.T) {
	f := gputest.New(t, 3, gputest.Full)
	f.AddMIG(t, 1, 2)
	a := f.Hold(t, 0, 700)
	b := f.Hold(t, 1, 300, "--mig", "1")
	r := look(t, f.Env()...)
	if r.Err != "" || len(r.Devices) != 3 || len(r.Notes) != 0 {
		t.Fatalf("Open: %+v", r)
	}
	const total, name = uint64(141 << 30), "Fake NVIDIA H200"
	gpu := func(i int) string { return fmt.Sprintf("GPU-fa4e0000-0000-0000-0000-0000000000%02x", i) }
	mig := func(k int) string { return fmt.Sprintf("MIG-fa4e0001-%04x-0000-0000-000000000000", k) }
	want := []Unit{
		{Device: 0, UUID: gpu(0), Name: name, Total: total, Free: total - 700<<20},
		{Device: 1, MIG: 1, UUID: mig(0), Name: name + " MIG 3g.70gb", Total: total / 2, Free: total / 2},
		{Device: 1, MIG: 2, UUID: mig(1), Name: name + " MIG 3g.70gb", Total: total / 2, Free: total/2 - 300<<20},
		{Device: 2, UUID: gpu(2), Name: name, Total: total, Free: total},
	}
	if !slices.Equal(r.Units, want) {
		t.Errorf("Units:\n%+v\nwant\n%+v", r.Units, want)
	}
	wantHolders := []Holder{
		{Device: 0, UUID: gpu(0), PID: a.Process.Pid, Bytes: 700 << 20},
		{Device: 1, UUID: gpu(1), PID: b.Process.Pid, Bytes: 300 << 20},
	}
	if !slices.Equal(r.Holders, wantHolders) {
		t.Errorf("Holders %+v, want %+v", r.Holders, wantHolders)
	}

	// Watching device 1 only: its MIG devices only.
	r = look(t, append(f.Env(), "GPU_TEST_VISIBLE=1")...)
	if r.Err != "" || !slices.Equal(r.Units, want[1:3]) {
		t.Errorf("Units of GPU 1: %+v, %s", r.Units, r.Err)
	}

	// A MIG-mode GPU without MIG devices offers nothing.
	r = look(t, f.Env("FAKE_NVML_MIG=1:2,2:1")...)
	if r.Err != "" || len(r.Units) != 4 || r.Units[3].MIG != 1 || r.Units[3].Total != total {
		t.Errorf("GPU 2 with one MIG device: %+v, %s", r.Units, r.Err)
	}
}

// A driver before MIG: no MIG query is made (go-nvml would crash on the
// missing symbol), every GPU is whole, and Open says so once.
func TestUnitsWithoutMIGQueries(t *testing.T) {
	f := gputest.New(t, 2, gputest.NoMIG)
	f.AddMIG(t, 1, 2)
	f.Hold(t, 1, 300, "--mig", "1")
	r := look(t, f.Env()...)
	const total = uint64(141 << 30)
	if r.Err != "" || len(r.Units) != 2 || r.Units[0].Free != total || r.Units[1].MIG != 0 ||
		r.Units[1].UUID != r.Devices[1].UUID || r.Units[1].Total != total || r.Units[1].Free != total-300<<20 {
		t.Errorf("Units: %+v, %s", r.Units, r.Err)
	}
	if !slices.Equal(r.Notes, []string{"NVML without MIG queries; MIG instances are not listed"}) {
		t.Errorf("Notes %q", r.Notes)
	}
	if calls := strings.Join(f.Calls(t), "\n"); strings.Contains(calls, "Mig") {
		t.Errorf("MIG queries called:\n%s", calls)
	}
	if u, err := Off(errors.New("no NVML")).Units(); u != nil || err == nil {
		t.Errorf("Off's Units = %v, %v", u, err)
	}
}

func TestSelectVisible(t *testing.T) {
	devs := []Device{{Index: 0, UUID: "GPU-aaaa-1"}, {Index: 1, UUID: "GPU-bbbb-2"}, {Index: 2, UUID: "GPU-abcd-3"}}
	for _, c := range []struct{ visible, want string }{
		{"", "0 1 2"}, {"all", "0 1 2"}, {"1", "1"}, {"2,0", "2 0"}, {"GPU-bbbb-2", "1"}, {"bbbb", "1"},
		{"GPU-ab", "2"}, {"GPU-a", ""}, {"7", ""}, {"none", ""}, {"0,0", "0"},
	} {
		var got []string
		for _, d := range selectVisible(devs, c.visible) {
			got = append(got, fmt.Sprint(d.Index))
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("selectVisible(%q) = %v, want %s", c.visible, got, c.want)
		}
	}
}

// deadPID is a pid that is certainly no live process: a child that exited
// and was reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestOursByPID(t *testing.T) {
	dead, live := deadPID(t), os.Getpid()
	old := Old{PIDs: []int{dead, live}, By: ByPID}
	hs := []Holder{{Device: 0, PID: dead, Bytes: 1}, {Device: 1, PID: live, Bytes: 2}, {Device: 0, PID: 1, Bytes: 3}}
	got := old.Ours(hs)
	// live is in the list but alive: after the kill that pid is someone
	// else's; pid 1 was never in the tree.
	if len(got) != 1 || got[0].PID != dead {
		t.Fatalf("Ours = %+v, want only the dead tree pid %d", got, dead)
	}
	// A process Watch saw that is killed but not dead yet is still the
	// tree's; one that only has its number is not.
	w := Watch(hs, []int{dead, live}, nil)
	if got := w.Ours(hs); len(got) != 2 || got[0].PID != dead || got[1].PID != live {
		t.Fatalf("Ours after Watch = %+v, want the dead pid and the same live process", got)
	}
	w.Starts[live]++
	if got := w.Ours(hs); len(got) != 1 || got[0].PID != dead {
		t.Fatalf("Ours with another start time = %+v, want only the dead pid", got)
	}
}

func TestOursByBaseline(t *testing.T) {
	gone := deadPID(t)
	host := pidMax() + 100 // a pid no process here can have
	old := Old{By: ByBaseline, PIDs: []int{gone}, Baseline: []Holder{{Device: 0, PID: host + 1}}}
	hs := []Holder{
		{Device: 0, PID: host + 1},    // there before the kernel: someone else's
		{Device: 1, PID: host + 1},    // the same pid on another device, new: counted
		{Device: 0, PID: host + 2},    // new, no visible process: counted
		{Device: 0, PID: os.Getpid()}, // a visible live process outside the tree: not counted
	}
	got := old.Ours(hs)
	if len(got) != 2 || got[0].Device != 1 || got[1].PID != host+2 {
		t.Fatalf("Ours = %+v", got)
	}
	if Mode([]Holder{{PID: os.Getpid()}, {PID: gone}}) != ByPID || Mode(nil, []Holder{{PID: host}}) != ByBaseline {
		t.Fatal("Mode: a dead pid is not another namespace's; a pid beyond pid_max is")
	}
}

// fakeSource lists entries until its release poll.
type fakeSource struct {
	list    []Holder
	release int // the poll from which the list is empty; 0: never
	polls   int
	err     error
}

func (f *fakeSource) Holders() ([]Holder, error) {
	f.polls++
	if f.err != nil {
		return nil, f.err
	}
	if f.release > 0 && f.polls >= f.release {
		return nil, nil
	}
	return f.list, nil
}

func TestConfirm(t *testing.T) {
	dead := deadPID(t)
	old := Old{By: ByPID, PIDs: []int{dead}, Held: []Holder{{Device: 0, PID: dead, Bytes: 2 << 30}, {Device: 1, PID: dead, Bytes: 1 << 29}}}
	src := &fakeSource{list: old.Held, release: 4}
	res, err := Confirm(context.Background(), src, old, time.Millisecond)
	if err != nil || len(res.Held) != 0 || res.Polls != 4 || res.ReleasedText() != "GPU0 2 GiB, GPU1 512 MiB" {
		t.Fatalf("released after 4 polls: %+v, %v (%s)", res, err, res.ReleasedText())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res, err = Confirm(ctx, &fakeSource{list: old.Held}, old, 5*time.Millisecond)
	if err != nil || len(res.Held) != 2 || res.Took < 50*time.Millisecond {
		t.Fatalf("never released: %+v, %v", res, err)
	}

	_, err = Confirm(context.Background(), &fakeSource{err: fmt.Errorf("GPU lost")}, old, time.Millisecond)
	if err == nil {
		t.Fatal("an NVML error did not end Confirm")
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{-1: "? MiB", 0: "0 B", 300 << 20: "300 MiB", 10<<30 + 200<<20: "10.1 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if s := Sum([]Holder{{Device: 0, Bytes: 1}, {Device: 0, Bytes: -1}, {Device: 1, Bytes: 2}, {Device: 1, Bytes: 3}}); s[0] != -1 || s[1] != 5 {
		t.Errorf("Sum = %v", s)
	}
	h := Holder{Device: 1, PID: os.Getpid(), Bytes: 1 << 30}
	me, err := user.LookupId(strconv.Itoa(os.Geteuid())) // root in the suites, tfgpu-ci-unit in CI's unit run
	testutil.NoErr(t, err)
	if d := Describe(h); !strings.HasPrefix(d, fmt.Sprintf("GPU1: pid %d (", os.Getpid())) || !strings.HasSuffix(d, " of "+me.Username+" holds 1 GiB") {
		t.Errorf("Describe = %q", d)
	}
}

// BenchmarkHolders times one process listing of two devices (compute and
// graphics lists each), in process, through go-nvml's cgo calls into the
// fake: what a --gpu-memory-limit sample asks of NVML. The fake finds
// holders by scanning every process's descriptors in /proc, so the figure
// grows with the host's processes; a driver answers from its own tables.
//
//	go test ./internal/gpu -run '^$' -bench Holders
func BenchmarkHolders(b *testing.B) {
	f := gputest.New(b, 2, gputest.Full)
	f.Hold(b, 0, 256)
	f.Hold(b, 1, 512)
	for _, kv := range f.Env() {
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v)
	}
	n, err := Open(f.Library(), "")
	testutil.NoErr(b, err)
	defer n.Close()
	for b.Loop() {
		if hs, err := n.Holders(); err != nil || len(hs) != 2 {
			b.Fatalf("Holders = %v, %v", hs, err)
		}
	}
}
