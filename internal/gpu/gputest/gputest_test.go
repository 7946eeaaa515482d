package gputest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The fake is tested through go-nvml, as the supervisor uses it. go-nvml
// binds NVML symbols process-wide into the first library it loads, so every
// look through NVML happens in a fresh child: the test binary re-executed as
// a probe (probeEnv set), which prints a snapshot as JSON. The parent sets up
// holders and asserts.

const probeEnv = "GPUTEST_PROBE"

const mib = 1 << 20

func TestMain(m *testing.M) {
	if os.Getenv(probeEnv) == "1" {
		os.Exit(probeMain())
	}
	// Holders that escape by double fork are orphaned at once; as a child
	// subreaper this process inherits them and can reap them (startEscape).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "gputest: PR_SET_CHILD_SUBREAPER:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// snapshot is what one process sees through go-nvml between Init and Shutdown.
type snapshot struct {
	Init    nvml.Return
	Driver  string
	NVML    string
	CUDA    int
	Devices []device
	MIG     []migInfo // per device, where the library has the MIG queries
}

// migInfo is what the MIG queries say of one device.
type migInfo struct {
	Current, Pending int
	Max              int
	MaxRet           nvml.Return
	ByIndex          []nvml.Return // GetMigDeviceHandleByIndex(0..7)
	Devices          []migDevice   // the handles it gave
}

type migDevice struct {
	UUID, Name string
	Memory     nvml.Memory
	IsMIG      bool
	Parent     int // GetIndex of GetDeviceHandleFromMigDeviceHandle
}

type device struct {
	Index, Minor int
	UUID, Name   string
	ByUUID       int // GetIndex of the handle DeviceGetHandleByUUID(UUID) returned
	Persistence  nvml.EnableState
	Memory       nvml.Memory
	Compute      []nvml.ProcessInfo
	Graphics     []nvml.ProcessInfo
	MPS          []nvml.ProcessInfo
}

// probeMain is the child side of observe. It loads NVML by its soname, as
// the supervisor does, so Fake.Env's LD_LIBRARY_PATH is what selects the fake.
func probeMain() int {
	s, err := look(nvml.New())
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	return 0
}

// look reads everything the supervisor may ask NVML. A failed Init is part
// of the snapshot; any other failure is an error.
func look(lib nvml.Interface) (snapshot, error) {
	var s snapshot
	if s.Init = lib.Init(); s.Init != nvml.SUCCESS {
		return s, nil
	}
	var errs []error
	ok := func(what string, ret nvml.Return) bool {
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("%s: %v", what, ret))
		}
		return ret == nvml.SUCCESS
	}
	set(ok, "SystemGetDriverVersion", &s.Driver)(lib.SystemGetDriverVersion())
	set(ok, "SystemGetNVMLVersion", &s.NVML)(lib.SystemGetNVMLVersion())
	set(ok, "SystemGetCudaDriverVersion_v2", &s.CUDA)(lib.SystemGetCudaDriverVersion_v2())
	n, ret := lib.DeviceGetCount()
	ok("DeviceGetCount", ret)
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if !ok(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), ret) {
			continue
		}
		var d device
		set(ok, "GetIndex", &d.Index)(h.GetIndex())
		set(ok, "GetMinorNumber", &d.Minor)(h.GetMinorNumber())
		set(ok, "GetUUID", &d.UUID)(h.GetUUID())
		set(ok, "GetName", &d.Name)(h.GetName())
		if byUUID, ret := lib.DeviceGetHandleByUUID(d.UUID); ok("DeviceGetHandleByUUID", ret) {
			set(ok, "GetIndex by UUID", &d.ByUUID)(byUUID.GetIndex())
		}
		set(ok, "GetPersistenceMode", &d.Persistence)(h.GetPersistenceMode())
		set(ok, "GetMemoryInfo", &d.Memory)(h.GetMemoryInfo())
		set(ok, "GetComputeRunningProcesses", &d.Compute)(h.GetComputeRunningProcesses())
		set(ok, "GetGraphicsRunningProcesses", &d.Graphics)(h.GetGraphicsRunningProcesses())
		set(ok, "GetMPSComputeRunningProcesses", &d.MPS)(h.GetMPSComputeRunningProcesses())
		s.Devices = append(s.Devices, d)
		if lib.Extensions().LookupSymbol("nvmlDeviceGetMigMode") == nil {
			s.MIG = append(s.MIG, lookMIG(h, ok))
		}
	}
	ok("Shutdown", lib.Shutdown())
	return s, errors.Join(errs...)
}

// lookMIG asks the MIG queries of device h, every MIG index up to 7.
func lookMIG(h nvml.Device, ok func(string, nvml.Return) bool) migInfo {
	var m migInfo
	var ret nvml.Return
	m.Current, m.Pending, ret = h.GetMigMode()
	ok("GetMigMode", ret)
	m.Max, m.MaxRet = h.GetMaxMigDeviceCount()
	for i := range 8 {
		mh, ret := h.GetMigDeviceHandleByIndex(i)
		m.ByIndex = append(m.ByIndex, ret)
		if ret != nvml.SUCCESS {
			continue
		}
		var d migDevice
		set(ok, "MIG GetUUID", &d.UUID)(mh.GetUUID())
		set(ok, "MIG GetName", &d.Name)(mh.GetName())
		set(ok, "MIG GetMemoryInfo", &d.Memory)(mh.GetMemoryInfo())
		set(ok, "IsMigDeviceHandle", &d.IsMIG)(mh.IsMigDeviceHandle())
		if parent, ret := mh.GetDeviceHandleFromMigDeviceHandle(); ok("GetDeviceHandleFromMigDeviceHandle", ret) {
			set(ok, "parent GetIndex", &d.Parent)(parent.GetIndex())
		}
		m.Devices = append(m.Devices, d)
	}
	return m
}

// set stores a query's value in *dst and notes its failure (ok).
func set[T any](ok func(string, nvml.Return) bool, what string, dst *T) func(T, nvml.Return) {
	return func(v T, ret nvml.Return) { *dst = v; ok(what, ret) }
}

// observe runs a probe with f's environment plus knobs: a fresh process, so
// a fresh library load and a fresh nvmlInit.
func observe(t *testing.T, f *Fake, knobs ...string) snapshot {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), probeEnv+"=1"), f.Env(knobs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, &stderr)
	}
	var s snapshot
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	return s
}

// listed is the entry the fake reports for a (non-MIG) process.
func listed(pid int, used uint64) nvml.ProcessInfo {
	return nvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: used,
		GpuInstanceId: math.MaxUint32, ComputeInstanceId: math.MaxUint32}
}

// compute is device dev's compute process list in s.
func compute(t *testing.T, s snapshot, dev int) []nvml.ProcessInfo {
	t.Helper()
	if s.Init != nvml.SUCCESS || dev >= len(s.Devices) {
		t.Fatalf("Init = %v, %d devices; want SUCCESS and device %d", s.Init, len(s.Devices), dev)
	}
	return s.Devices[dev].Compute
}

func wantCompute(t *testing.T, s snapshot, dev int, want ...nvml.ProcessInfo) {
	t.Helper()
	if got := compute(t, s, dev); !slices.Equal(got, want) {
		t.Errorf("GPU %d compute processes = %+v, want %+v", dev, got, want)
	}
}

func wantCall(t *testing.T, calls []string, line string) {
	t.Helper()
	if !slices.Contains(calls, line) {
		t.Errorf("NVML calls lack %q:\n%s", line, strings.Join(calls, "\n"))
	}
}

func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // "signal: killed"
}

func TestDevices(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		knobs       []string
		persistence nvml.EnableState
		total       uint64
	}{
		{name: "defaults", persistence: nvml.FEATURE_ENABLED, total: 141 << 30},
		{name: "knobs", knobs: []string{"FAKE_NVML_PERSISTENCE=0", "FAKE_NVML_TOTAL_MEM=1073741824"},
			persistence: nvml.FEATURE_DISABLED, total: 1 << 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := New(t, 2, Full)
			s := observe(t, f, tt.knobs...)
			if s.Init != nvml.SUCCESS || s.Driver != "999.99-fake" || s.NVML != "12.999.99-fake" || s.CUDA != 12080 {
				t.Errorf("Init %v, driver %q, NVML %q, CUDA %d", s.Init, s.Driver, s.NVML, s.CUDA)
			}
			if len(s.Devices) != 2 {
				t.Fatalf("%d devices, want 2", len(s.Devices))
			}
			for i, d := range s.Devices {
				if n := len(d.Compute) + len(d.Graphics) + len(d.MPS); n != 0 {
					t.Errorf("device %d lists %d processes, want none", i, n)
				}
				d.Compute, d.Graphics, d.MPS = nil, nil, nil
				want := device{Index: i, Minor: i, ByUUID: i, Name: "Fake NVIDIA H200",
					UUID:        fmt.Sprintf("GPU-fa4e0000-0000-0000-0000-0000000000%02x", i),
					Persistence: tt.persistence,
					Memory:      nvml.Memory{Total: tt.total, Free: tt.total},
				}
				if !reflect.DeepEqual(d, want) {
					t.Errorf("device %d = %+v\nwant %+v", i, d, want)
				}
			}
			calls := f.Calls(t)
			if len(calls) == 0 || calls[0] != "nvmlInit_v2 ret=0" || calls[len(calls)-1] != "nvmlShutdown ret=0" {
				t.Errorf("NVML calls do not run from nvmlInit_v2 to nvmlShutdown:\n%s", strings.Join(calls, "\n"))
			}
			wantCall(t, calls, "nvmlDeviceGetCount_v2 n=2 ret=0")
			wantCall(t, calls, "nvmlDeviceGetHandleByIndex_v2 dev=1 ret=0")
			// No processes: SUCCESS with 0 entries into go-nvml's 1-entry buffer.
			wantCall(t, calls, "nvmlDeviceGetComputeRunningProcesses_v3 dev=1 cap=1 n=0 ret=0")
		})
	}
}

func TestHolderListedWhileHolding(t *testing.T) {
	t.Parallel()
	f := New(t, 2, Full)
	h := f.Hold(t, 1, 300)

	s := observe(t, f)
	wantCompute(t, s, 0)
	wantCompute(t, s, 1, listed(h.Process.Pid, 300*mib))
	if m := s.Devices[1].Memory; m.Used != 300*mib || m.Free != m.Total-300*mib {
		t.Errorf("GPU 1 memory = %+v, want 300 MiB used", m)
	}

	kill(t, h)
	s = observe(t, f)
	wantCompute(t, s, 1)
	if m := s.Devices[1].Memory; m.Used != 0 {
		t.Errorf("GPU 1 memory after the holder died = %+v, want none used", m)
	}
	// Released at once (FAKE_NVML_RELEASE_MS=0): the registration is gone too.
	if _, err := os.Stat(filepath.Join(f.Root, "ctx", fmt.Sprintf("%d.1", h.Process.Pid))); !os.IsNotExist(err) {
		t.Errorf("registration of the dead holder: %v, want removed", err)
	}
}

// Not parallel: a process another test forks inherits this process's open
// descriptors, the held device's too, until it execs, and a probe that
// looks in that window lists it as a second holder.
func TestUnregisteredHolder(t *testing.T) {
	tests := []struct {
		name  string
		knobs []string
		bytes uint64
	}{
		{name: "default memory", bytes: 256 * mib},
		{name: "FAKE_NVML_DEFAULT_MEM", knobs: []string{"FAKE_NVML_DEFAULT_MEM=12345"}, bytes: 12345},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := New(t, 1, Full)
			// This process holds the device; Go opens files O_CLOEXEC, so the
			// probe does not inherit the hold.
			dev, err := os.Open(f.Device(0))
			testutil.NoErr(t, err)
			defer dev.Close()
			wantCompute(t, observe(t, f, tt.knobs...), 0, listed(os.Getpid(), tt.bytes))

			dev.Close()
			wantCompute(t, observe(t, f, tt.knobs...), 0)
		})
	}
}

func TestSlowRelease(t *testing.T) {
	t.Parallel()
	t.Run("600ms", func(t *testing.T) {
		t.Parallel()
		const delay = 600 * time.Millisecond
		knob := "FAKE_NVML_RELEASE_MS=600"
		f := New(t, 1, Full)
		h := f.Hold(t, 0, 100)
		pid := h.Process.Pid
		ctx := filepath.Join(f.Root, "ctx", fmt.Sprintf("%d.0", pid))
		kill(t, h)

		// The first look after the death starts the delay.
		start := time.Now()
		wantCompute(t, observe(t, f, knob), 0, listed(pid, 100*mib))
		if _, err := os.Stat(ctx + ".gone"); err != nil {
			t.Errorf("release stamp: %v", err)
		}
		for len(compute(t, observe(t, f, knob), 0)) > 0 {
			if time.Since(start) > delay+10*time.Second {
				t.Fatalf("still listed %v after the holder died", time.Since(start))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if d := time.Since(start); d < delay {
			t.Errorf("released %v after it was first seen gone, want at least %v", d, delay)
		}
		for _, p := range []string{ctx, ctx + ".gone"} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s after release: %v, want removed", p, err)
			}
		}
	})
	t.Run("never", func(t *testing.T) {
		t.Parallel()
		f := New(t, 1, Full)
		h := f.Hold(t, 0, 100)
		pid := h.Process.Pid
		kill(t, h)
		for start := time.Now(); time.Since(start) < time.Second; time.Sleep(100 * time.Millisecond) {
			wantCompute(t, observe(t, f, "FAKE_NVML_RELEASE_MS=-1"), 0, listed(pid, 100*mib))
		}
	})
}

func TestPIDOffset(t *testing.T) {
	t.Parallel()
	const offset = 1 << 22 // above pid_max, as a host PID seen from a namespace would be
	f := New(t, 1, Full)
	h := f.Hold(t, 0, 10)
	wantCompute(t, observe(t, f, "FAKE_NVML_PID_OFFSET="+strconv.Itoa(offset)), 0, listed(h.Process.Pid+offset, 10*mib))
}

func TestMemoryUnavailable(t *testing.T) {
	t.Parallel()
	f := New(t, 1, Full)
	h := f.Hold(t, 0, 10)
	s := observe(t, f, "FAKE_NVML_MEM_UNAVAILABLE=1")
	// NVML_VALUE_NOT_AVAILABLE is (-1) in an unsigned long long.
	wantCompute(t, s, 0, listed(h.Process.Pid, math.MaxUint64))
	if m := s.Devices[0].Memory; m.Used != 0 {
		t.Errorf("memory = %+v, want unavailable figures counted as 0", m)
	}
}

func TestInitFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		knobs []string
		want  nvml.Return
	}{
		{name: "FAKE_NVML_INIT_FAIL", knobs: []string{"FAKE_NVML_INIT_FAIL=9"}, want: nvml.ERROR_DRIVER_NOT_LOADED},
		{name: "no root", knobs: []string{"FAKE_NVML_ROOT="}, want: nvml.ERROR_DRIVER_NOT_LOADED},
		{name: "bad knob", knobs: []string{"FAKE_NVML_RELEASE_MS=soon"}, want: nvml.ERROR_UNKNOWN},
	}
	for _, bad := range []string{"0", "0:", ":1", "0:0", "0:8", "x:1", "0:1,", "0:1,0:2", "0:1;1:1", "-1:1", "1:1", "64:1"} {
		tests = append(tests, struct {
			name  string
			knobs []string
			want  nvml.Return
		}{name: "FAKE_NVML_MIG=" + bad, knobs: []string{"FAKE_NVML_MIG=" + bad}, want: nvml.ERROR_UNKNOWN})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := New(t, 1, Full)
			if got := observe(t, f, tt.knobs...).Init; got != tt.want {
				t.Errorf("Init() = %d, want %d", got, tt.want)
			}
			want := []string{fmt.Sprintf("nvmlInit_v2 ret=%d", tt.want)}
			if calls := f.Calls(t); !slices.Equal(calls, want) {
				t.Errorf("NVML calls = %q, want %q", calls, want)
			}
		})
	}
}

func TestProcessListVersions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		variant      Variant
		used, unused string
	}{
		{name: "Full", variant: Full, used: "_v3", unused: "_v2"},
		{name: "NoV3", variant: NoV3, used: "_v2", unused: "_v3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := New(t, 1, tt.variant)
			h := f.Hold(t, 0, 200)
			wantCompute(t, observe(t, f), 0, listed(h.Process.Pid, 200*mib))
			calls := f.Calls(t)
			for _, list := range []string{"Compute", "Graphics", "MPSCompute"} {
				sym := "nvmlDeviceGet" + list + "RunningProcesses"
				n := 1
				if list != "Compute" {
					n = 0
				}
				wantCall(t, calls, fmt.Sprintf("%s%s dev=0 cap=1 n=%d ret=0", sym, tt.used, n))
				for _, c := range calls {
					if strings.HasPrefix(c, sym+tt.unused+" ") || strings.HasPrefix(c, sym+" ") {
						t.Errorf("%s called: %q", tt.name, c)
					}
				}
			}
		})
	}
}

func TestInsufficientSize(t *testing.T) {
	t.Parallel()
	f := New(t, 1, Full)
	var want []nvml.ProcessInfo
	for i := 1; i <= 3; i++ {
		h := f.Hold(t, 0, 10*i)
		want = append(want, listed(h.Process.Pid, uint64(10*i)*mib))
	}
	slices.SortFunc(want, func(a, b nvml.ProcessInfo) int { return int(a.Pid) - int(b.Pid) })

	s := observe(t, f)
	wantCompute(t, s, 0, want...)
	if used := s.Devices[0].Memory.Used; used != 60*mib {
		t.Errorf("memory used = %d, want 60 MiB", used)
	}
	// go-nvml starts with 1 entry, is told 3 are needed, and doubles that.
	calls := f.Calls(t)
	wantCall(t, calls, "nvmlDeviceGetComputeRunningProcesses_v3 dev=0 cap=1 n=3 ret=7")
	wantCall(t, calls, "nvmlDeviceGetComputeRunningProcesses_v3 dev=0 cap=6 n=3 ret=0")
}

// rawABI calls the fake through ctypes: the C contract go-nvml never shows
// (calls before init, NULL buffers, the v1 layout, nested init).
const rawABI = `
import ctypes, json, sys
from ctypes import byref, c_uint, c_ulonglong, c_void_p
lib = ctypes.CDLL(sys.argv[1])
lib.nvmlErrorString.restype = ctypes.c_char_p
class V1(ctypes.Structure):
    _fields_ = [("pid", c_uint), ("mem", c_ulonglong)]
class V2(ctypes.Structure):
    _fields_ = [("pid", c_uint), ("mem", c_ulonglong), ("gi", c_uint), ("ci", c_uint)]
r, n, dev = {}, c_uint(0), c_void_p()
r["count before init"] = lib.nvmlDeviceGetCount_v2(byref(n))
r["shutdown before init"] = lib.nvmlShutdown()
r["init"] = lib.nvmlInit()
r["handle of a missing index"] = lib.nvmlDeviceGetHandleByIndex_v2(7, byref(dev))
lib.nvmlDeviceGetHandleByIndex_v2(0, byref(dev))
n = c_uint(0)
r["query with no buffer"] = [lib.nvmlDeviceGetComputeRunningProcesses_v2(dev, byref(n), None), n.value]
one = (V2 * 1)()
n = c_uint(1)
r["buffer too small"] = [lib.nvmlDeviceGetComputeRunningProcesses_v2(dev, byref(n), one), n.value]
r["NULL count"] = lib.nvmlDeviceGetComputeRunningProcesses_v2(dev, None, one)
n = c_uint(2)
r["NULL buffer"] = lib.nvmlDeviceGetComputeRunningProcesses_v2(dev, byref(n), None)
n = c_uint(1)
r["bad handle"] = lib.nvmlDeviceGetComputeRunningProcesses_v2(c_void_p(8), byref(n), one)
v1 = (V1 * 4)()
n = c_uint(4)
r["v1"] = [lib.nvmlDeviceGetComputeRunningProcesses(dev, byref(n), v1), [[e.pid, e.mem] for e in v1[:n.value]]]
n = c_uint(4)
r["graphics v1"] = [lib.nvmlDeviceGetGraphicsRunningProcesses(dev, byref(n), v1), n.value]
r["strings"] = [lib.nvmlErrorString(9).decode(), lib.nvmlErrorString(999).decode(), lib.nvmlErrorString(4242).decode()]
r["nested init"] = [lib.nvmlInit_v2(), lib.nvmlShutdown(), lib.nvmlDeviceGetCount_v2(byref(n)), lib.nvmlShutdown(), lib.nvmlDeviceGetCount_v2(byref(n))]
print(json.dumps(r))
`

func TestRawABI(t *testing.T) {
	t.Parallel()
	f := New(t, 1, Full)
	a, b := f.Hold(t, 0, 1).Process.Pid, f.Hold(t, 0, 2).Process.Pid
	entries := [][]uint64{{uint64(a), 1 * mib}, {uint64(b), 2 * mib}}
	slices.SortFunc(entries, func(x, y []uint64) int { return int(x[0]) - int(y[0]) })

	cmd := exec.Command(python, "-c", rawABI, f.Library())
	cmd.Env = append(os.Environ(), f.Env()...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, &stderr)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"count before init":         nvml.ERROR_UNINITIALIZED,
		"shutdown before init":      nvml.ERROR_UNINITIALIZED,
		"init":                      nvml.SUCCESS,
		"handle of a missing index": nvml.ERROR_INVALID_ARGUMENT,
		"query with no buffer":      []any{nvml.ERROR_INSUFFICIENT_SIZE, 2},
		"buffer too small":          []any{nvml.ERROR_INSUFFICIENT_SIZE, 2},
		"NULL count":                nvml.ERROR_INVALID_ARGUMENT,
		"NULL buffer":               nvml.ERROR_INVALID_ARGUMENT,
		"bad handle":                nvml.ERROR_INVALID_ARGUMENT,
		"v1":                        []any{nvml.SUCCESS, entries},
		"graphics v1":               []any{nvml.SUCCESS, 0},
		"strings":                   []string{"Driver Not Loaded", "Unknown Error", "Unknown Error"},
		"nested init": []nvml.Return{nvml.SUCCESS, nvml.SUCCESS, nvml.SUCCESS, nvml.SUCCESS,
			nvml.ERROR_UNINITIALIZED},
	}
	// Compare through JSON, where Go's and Python's numbers and lists agree.
	for k, w := range want {
		wj, _ := json.Marshal(w)
		gj, _ := json.Marshal(got[k])
		if !bytes.Equal(wj, gj) {
			t.Errorf("%s: got %s, want %s", k, gj, wj)
		}
	}
}

// escapeStarter plays a kernel cell: it starts an escaped holder and prints
// its pid, then waits to be killed.
const escapeStarter = `
import signal, sys
import holder
print(holder.escape(0, 64, sys.argv[1]), flush=True)
signal.pause()
`

// startEscape runs escapeStarter as the leader of its own process group and
// returns the starter and the escaped holder's pid. The cleanup kills both by
// pid and reaps both: the holder is ours to reap once the starter is dead,
// as this process is a child subreaper.
func startEscape(t *testing.T, f *Fake, how string) (starter *exec.Cmd, pid int) {
	t.Helper()
	testutil.Integration(t) // a Python starter
	r, w, err := os.Pipe()
	testutil.NoErr(t, err)
	defer r.Close()
	// A file, not a buffer: the escaped holder inherits the starter's
	// stderr, and Wait would wait for it to close a pipe.
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	testutil.NoErr(t, err)
	defer stderr.Close()
	starter = exec.Command(python, "-c", escapeStarter, how)
	starter.Env = append(os.Environ(), f.Env()...)
	starter.Stdout, starter.Stderr = w, stderr
	starter.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = starter.Start()
	w.Close()
	testutil.NoErr(t, err)
	t.Cleanup(func() {
		if pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		_ = starter.Process.Kill()
		_ = starter.Wait()
		if pid > 0 {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, 0, nil) // ECHILD: reaped already
		}
	})
	if pid, err = readReady(r, readyTimeout); err != nil {
		msg, _ := os.ReadFile(stderr.Name())
		t.Fatalf("escape %s: %v\n%s", how, err, msg)
	}
	return starter, pid
}

// procStatus returns field key of /proc/<pid>/status.
func procStatus(t *testing.T, pid int, key string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	testutil.NoErr(t, err)
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, key)
	return ""
}

func TestEscapes(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"setsid", "double_fork", "ignore_term"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			f := New(t, 1, Full)
			starter, pid := startEscape(t, f, how)
			wantCompute(t, observe(t, f), 0, listed(pid, 64*mib))

			pgid, err := unix.Getpgid(pid)
			testutil.NoErr(t, err)
			if pgid == starter.Process.Pid {
				t.Errorf("holder %d is in the starter's process group %d", pid, pgid)
			}
			sid, err := unix.Getsid(pid)
			testutil.NoErr(t, err)
			switch how {
			case "setsid":
				if sid != pid {
					t.Errorf("holder %d is in session %d, want its own", pid, sid)
				}
			case "double_fork":
				// The session is the intermediate's, which exited: the
				// holder is no session leader, as a daemon should be.
				starterSid, err := unix.Getsid(starter.Process.Pid)
				testutil.NoErr(t, err)
				if ppid := procStatus(t, pid, "PPid"); sid == starterSid || ppid != strconv.Itoa(os.Getpid()) {
					t.Errorf("holder %d: session %d, parent %s; want a new session, reparented to us", pid, sid, ppid)
				}
			case "ignore_term":
				ign, err := strconv.ParseUint(procStatus(t, pid, "SigIgn"), 16, 64)
				testutil.NoErr(t, err)
				if pgid != pid || ign&(1<<(unix.SIGTERM-1)) == 0 {
					t.Errorf("holder %d: process group %d, SigIgn %#x; want its own group, SIGTERM ignored", pid, pgid, ign)
				}
			}
		})
	}
}

// TestMIG: device 1 of 3 in MIG mode with 3 MIG devices, a holder of MIG
// device 2 and one of the whole device 0. The MIG holder is listed on its
// parent with its GPU instance, and its memory counts on the parent and on
// its MIG device only.
func TestMIG(t *testing.T) {
	t.Parallel()
	f := New(t, 3, Full)
	f.AddMIG(t, 1, 3)
	whole := f.Hold(t, 0, 100)
	mig := f.Hold(t, 1, 300, "--mig", "2")
	if _, err := os.Stat(filepath.Join(f.Root, "ctx", fmt.Sprintf("%d.1-mig2", mig.Process.Pid))); err != nil {
		t.Errorf("MIG holder's registration: %v", err)
	}

	s := observe(t, f)
	wantCompute(t, s, 0, listed(whole.Process.Pid, 100*mib))
	wantCompute(t, s, 1, nvml.ProcessInfo{Pid: uint32(mig.Process.Pid), UsedGpuMemory: 300 * mib,
		GpuInstanceId: 2, ComputeInstanceId: 0})
	wantCompute(t, s, 2)
	if m := s.Devices[1].Memory; m.Used != 300*mib || m.Total != 141<<30 {
		t.Errorf("GPU 1 memory = %+v, want 300 MiB of 141 GiB used", m)
	}
	if len(s.MIG) != 3 {
		t.Fatalf("MIG queries of %d devices, want 3", len(s.MIG))
	}
	notMIG := migInfo{Current: nvml.DEVICE_MIG_DISABLE, Pending: nvml.DEVICE_MIG_DISABLE, MaxRet: nvml.ERROR_NOT_SUPPORTED,
		ByIndex: slices.Repeat([]nvml.Return{nvml.ERROR_NOT_SUPPORTED}, 8)}
	for _, i := range []int{0, 2} {
		if !reflect.DeepEqual(s.MIG[i], notMIG) {
			t.Errorf("GPU %d MIG = %+v, want %+v", i, s.MIG[i], notMIG)
		}
	}
	want := migInfo{Current: nvml.DEVICE_MIG_ENABLE, Pending: nvml.DEVICE_MIG_ENABLE, Max: 7, MaxRet: nvml.SUCCESS,
		ByIndex: []nvml.Return{nvml.SUCCESS, nvml.SUCCESS, nvml.SUCCESS, nvml.ERROR_NOT_FOUND, nvml.ERROR_NOT_FOUND,
			nvml.ERROR_NOT_FOUND, nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT}}
	total := uint64(141<<30) / 3
	for k := range 3 {
		used := uint64(0)
		if k == 2 {
			used = 300 * mib
		}
		want.Devices = append(want.Devices, migDevice{
			UUID:   fmt.Sprintf("MIG-fa4e0001-%04x-0000-0000-000000000000", k),
			Name:   "Fake NVIDIA H200 MIG 2g.47gb",
			Memory: nvml.Memory{Total: total, Used: used, Free: total - used},
			IsMIG:  true, Parent: 1,
		})
	}
	if !reflect.DeepEqual(s.MIG[1], want) {
		t.Errorf("GPU 1 MIG = %+v\nwant %+v", s.MIG[1], want)
	}
	wantCall(t, f.Calls(t), "nvmlDeviceGetMemoryInfo dev=1 mig=2 used=314572800 ret=0")

	kill(t, mig)
	s = observe(t, f)
	wantCompute(t, s, 1)
	if len(s.MIG) != 3 || len(s.MIG[1].Devices) != 3 || s.MIG[1].Devices[2].Memory.Used != 0 {
		t.Errorf("MIG after its holder died: %+v", s.MIG)
	}
}

// Without the MIG symbols (a driver before MIG) the knob's holders still
// count on their parent device.
func TestNoMIG(t *testing.T) {
	t.Parallel()
	f := New(t, 2, NoMIG)
	f.AddMIG(t, 1, 2)
	h := f.Hold(t, 1, 50, "--mig", "1")
	s := observe(t, f)
	if len(s.MIG) != 0 {
		t.Errorf("MIG queries answered by the NoMIG variant: %+v", s.MIG)
	}
	wantCompute(t, s, 1, nvml.ProcessInfo{Pid: uint32(h.Process.Pid), UsedGpuMemory: 50 * mib, GpuInstanceId: 1})
}

// A knob naming several devices, in any order: each gets its MIG devices
// (handles exist whether or not their files do).
func TestMIGKnobList(t *testing.T) {
	t.Parallel()
	f := New(t, 3, Full)
	s := observe(t, f, "FAKE_NVML_MIG=2:7,0:1")
	if len(s.MIG) != 3 || len(s.MIG[0].Devices) != 1 || len(s.MIG[1].Devices) != 0 || len(s.MIG[2].Devices) != 7 {
		t.Fatalf("MIG = %+v", s.MIG)
	}
	if d := s.MIG[2].Devices[6]; d.UUID != "MIG-fa4e0002-0006-0000-0000-000000000000" || d.Name != "Fake NVIDIA H200 MIG 1g.20gb" {
		t.Errorf("GPU 2 MIG 6 = %+v", d)
	}
}
