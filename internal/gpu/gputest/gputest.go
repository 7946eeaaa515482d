// Package gputest gives tests on machines without a GPU a fake NVML
// (docs/testing.md): a libnvidia-ml.so.1 compiled from testdata/fakenvml.c by
// the test itself, and holder.py, with which a plain process or a Jupyter
// kernel holds a fake GPU the way CUDA does.
//
// The model: device N is the file Root/nvidiaN, and a process is listed on
// device N exactly while it has that file open. A holder registers its memory
// in Root/ctx/<pid>.<N>; an unregistered holder gets FAKE_NVML_DEFAULT_MEM.
// Knobs are environment variables read by the nvmlInit that takes the
// library's init refcount from 0 to 1 (exact rules in testdata/fakenvml.c):
//
//	FAKE_NVML_RELEASE_MS=M      a registered holder that has gone stays listed
//	                            M ms more; -1: forever (default 0)
//	FAKE_NVML_PID_OFFSET=K      reported pids are real pids + K (a PID namespace)
//	FAKE_NVML_MEM_UNAVAILABLE=1 per-process memory is NVML_VALUE_NOT_AVAILABLE
//	FAKE_NVML_INIT_FAIL=CODE    nvmlInit returns this nvmlReturn_t (9: no driver)
//	FAKE_NVML_PERSISTENCE=0|1   persistence mode (default 1)
//	FAKE_NVML_DEFAULT_MEM=B     bytes of an unregistered holder (default 256 MiB)
//	FAKE_NVML_TOTAL_MEM=B       bytes per device (default 141 GiB)
//	FAKE_NVML_MIG=N:K[,N:K...]  device N is in MIG mode with K MIG devices
//	                            (1..7); Fake.AddMIG sets it up
//
// MIG: MIG device k (0..K-1) of device N is the file Root/nvidiaN-migk; a
// process holds it exactly while it has that file open, and registers its
// memory in Root/ctx/<pid>.<N>-mig<k>. It is listed on device N (with
// gpuInstanceId k, computeInstanceId 0) and its memory counts in device N's
// used memory as well as in the MIG device's, whose total is device N's / K.
// MIG handles (nvmlDeviceGetMigDeviceHandleByIndex) have UUID
// MIG-fa4e00NN-00KK-0000-0000-000000000000 (NN the device index, KK the MIG
// index, two lowercase hex digits each) and name
// "Fake NVIDIA H200 MIG <7/K>g.<GiB>gb". nvmlDeviceGetMigMode answers SUCCESS
// on every device (MIG disabled where the knob does not name it).
//
// FAKE_NVML_ROOT and FAKE_NVML_LOG come from Fake.Env; without a root the
// fake's nvmlInit returns NVML_ERROR_DRIVER_NOT_LOADED. Devices are named
// "Fake NVIDIA H200" with UUID GPU-fa4e0000-0000-0000-0000-0000000000NN (NN
// the index in two lowercase hex digits), minor number = index; the driver
// version is "999.99-fake", NVML "12.999.99-fake", CUDA 12080.
//
// One process must load one fake library file at most, initialised with one
// set of knobs: go-nvml resolves the NVML symbols of the test binary through
// the dynamic loader into whatever library it loaded first, with
// RTLD_GLOBAL, and never rebinds them. Run each scenario that needs its own
// library or knobs in a child process, with Env.
package gputest

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// SOName is the file name of the fake library in a LibDir, NVML's soname.
const SOName = "libnvidia-ml.so.1"

// python is the Debian interpreter that has the Jupyter stack (docs/testing.md#what-the-tests-need).
const python = "/usr/bin/python3"

// readyTimeout bounds the wait for a holder to report that it holds.
const readyTimeout = 20 * time.Second

//go:embed testdata/fakenvml.c
var fakeSource []byte

//go:embed holder.py
var holderSource []byte

// Variant selects which symbols the fake library exports.
type Variant int

const (
	// Full exports every process-list version, _v3 included, like a
	// current driver.
	Full Variant = iota
	// NoV3 leaves out the _v3 process lists, like a driver before them:
	// go-nvml must fall back to the _v2 symbols.
	NoV3
	// NoMIG leaves out the MIG queries (nvmlDeviceGetMigMode and the
	// rest), like a driver before MIG: callers must not call them.
	NoMIG
)

// nvmlHeaderDir is go-nvml's directory holding nvml.h, from the build list
// of the module under test, so the fake is checked against the very header
// go-nvml was generated from.
var nvmlHeaderDir = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml").Output()
	if err != nil {
		return "", fmt.Errorf("locate go-nvml: go list -m: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "pkg", "nvml")
	if _, err := os.Stat(filepath.Join(dir, "nvml.h")); err != nil {
		return "", fmt.Errorf("locate go-nvml's nvml.h: %w", err)
	}
	return dir, nil
})

// Build puts the fake library variant v into a new temporary directory
// and returns that directory, which holds SOName; LD_LIBRARY_PATH=libDir
// selects it. The first Build of a variant in a process compiles it; the
// others write the same bytes (a test binary's tests would otherwise spend
// most of their time in gcc). A missing gcc or a failed compile fails the
// test: nothing that matters may be skipped.
func Build(t testing.TB, v Variant) (libDir string) {
	t.Helper()
	lib, err := compiled(t, v)
	if err != nil {
		t.Fatalf("gputest: %v", err)
	}
	libDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(libDir, SOName), lib, 0o755); err != nil {
		t.Fatalf("gputest: %v", err)
	}
	return libDir
}

var (
	builtMu sync.Mutex
	built   = map[Variant][]byte{}
)

// compiled is the fake library variant v, compiled by gcc at its first
// call in this process, in one of t's temporary directories.
func compiled(t testing.TB, v Variant) ([]byte, error) {
	builtMu.Lock()
	defer builtMu.Unlock()
	if lib, ok := built[v]; ok {
		return lib, nil
	}
	inc, err := nvmlHeaderDir()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	src, out := filepath.Join(dir, "fakenvml.c"), filepath.Join(dir, SOName)
	if err := os.WriteFile(src, fakeSource, 0o644); err != nil {
		return nil, err
	}
	args := []string{"-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread",
		"-Wl,-soname," + SOName, "-I", inc, "-o", out, src}
	switch v {
	case NoV3:
		args = append(args, "-DFAKE_NVML_NO_V3")
	case NoMIG:
		args = append(args, "-DFAKE_NVML_NO_MIG")
	}
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compile the fake NVML: gcc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	lib, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	built[v] = lib
	return lib, nil
}

// Fake is one fake machine: its devices, its library and its call log. The
// directories are the test's temporary directories, readable by its uid only.
type Fake struct {
	Root      string // FAKE_NVML_ROOT: nvidia0..nvidiaN-1 and ctx/
	LibDir    string // holds SOName
	Log       string // FAKE_NVML_LOG: one line per NVML call, see Calls
	HolderDir string // holds holder.py; Env puts it first on PYTHONPATH

	mig map[int]int // device -> MIG devices, from AddMIG
}

// New builds the library variant v and creates a root with devices device
// files.
func New(t testing.TB, devices int, v Variant) *Fake {
	t.Helper()
	root := t.TempDir()
	f := &Fake{
		Root:      root,
		LibDir:    Build(t, v),
		Log:       filepath.Join(root, "calls.log"),
		HolderDir: filepath.Join(root, "python"),
	}
	for _, dir := range []string{filepath.Join(root, "ctx"), f.HolderDir} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("gputest: %v", err)
		}
	}
	for n := range devices {
		if err := os.WriteFile(f.Device(n), nil, 0o666); err != nil {
			t.Fatalf("gputest: %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.HolderDir, "holder.py"), holderSource, 0o644); err != nil {
		t.Fatalf("gputest: %v", err)
	}
	return f
}

// Library is the path of the fake library, for nvml.WithLibraryPath or
// TFGPU_NVML_LIBRARY.
func (f *Fake) Library() string { return filepath.Join(f.LibDir, SOName) }

// Device is the path of device n's file: a process that opens it holds
// device n (unregistered, so with FAKE_NVML_DEFAULT_MEM) until it closes it.
func (f *Fake) Device(n int) string { return filepath.Join(f.Root, fmt.Sprintf("nvidia%d", n)) }

// AddMIG puts device n in MIG mode with k MIG devices: it creates their
// files, nvidiaN-mig0..nvidiaN-mig<k-1> (see MIGDevice), and from then on
// Env sets FAKE_NVML_MIG for every device given to AddMIG (a knob passed to
// Env overrides it). Call it before starting the processes that use the fake.
func (f *Fake) AddMIG(t testing.TB, n, k int) {
	t.Helper()
	for i := range k {
		if err := os.WriteFile(f.MIGDevice(n, i), nil, 0o666); err != nil {
			t.Fatalf("gputest: %v", err)
		}
	}
	if f.mig == nil {
		f.mig = map[int]int{}
	}
	f.mig[n] = k
}

// MIGDevice is the path of the file of MIG device k of device n: a process
// that opens it holds that MIG device until it closes it.
func (f *Fake) MIGDevice(n, k int) string {
	return filepath.Join(f.Root, fmt.Sprintf("nvidia%d-mig%d", n, k))
}

// Env returns the environment entries that point a child process at this
// fake, followed by knobs ("FAKE_NVML_RELEASE_MS=500", …): use
// append(os.Environ(), f.Env(…)...), where later entries win. It sets
// FAKE_NVML_ROOT and FAKE_NVML_LOG, and puts LibDir first on LD_LIBRARY_PATH
// (NVML loaded by its soname finds the fake) and HolderDir first on
// PYTHONPATH (a kernel can import holder); after AddMIG, FAKE_NVML_MIG too.
func (f *Fake) Env(knobs ...string) []string {
	env := []string{
		"FAKE_NVML_ROOT=" + f.Root,
		"FAKE_NVML_LOG=" + f.Log,
		"LD_LIBRARY_PATH=" + prependPath(f.LibDir, os.Getenv("LD_LIBRARY_PATH")),
		"PYTHONPATH=" + prependPath(f.HolderDir, os.Getenv("PYTHONPATH")),
	}
	if len(f.mig) > 0 {
		var migs []string
		for _, n := range slices.Sorted(maps.Keys(f.mig)) {
			migs = append(migs, fmt.Sprintf("%d:%d", n, f.mig[n]))
		}
		env = append(env, "FAKE_NVML_MIG="+strings.Join(migs, ","))
	}
	return append(env, knobs...)
}

func prependPath(dir, list string) string {
	if list == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + list
}

// Calls returns the NVML calls logged so far, oldest first, one per entry:
// the symbol called, then key=value details, ending with ret=<nvmlReturn_t>,
// e.g. "nvmlDeviceGetComputeRunningProcesses_v3 dev=0 cap=1 n=3 ret=7" (cap:
// the caller's buffer, n: the entries there were). Calls between nvmlInit
// and the last nvmlShutdown are logged, and every nvmlInit attempt.
func (f *Fake) Calls(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(f.Log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("gputest: %v", err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// Hold starts `python3 holder.py dev mib extra…`, a process that holds
// device dev with mib MiB registered, and returns once it holds. extra takes
// holder.py's flags --mig K (hold MIG device K of dev instead, see AddMIG),
// --setsid and --ignore-term (--double-fork is not for
// Hold: the holder would not be the command; use holder.escape). The test's
// cleanup kills and reaps it; a test may do so earlier itself.
func (f *Fake) Hold(t testing.TB, dev, mib int, extra ...string) *exec.Cmd {
	t.Helper()
	testutil.Integration(t) // a Python holder
	if slices.Contains(extra, "--double-fork") {
		t.Fatalf("gputest: Hold does not take --double-fork")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatalf("gputest: %v", err)
	}
	defer r.Close()
	args := append([]string{filepath.Join(f.HolderDir, "holder.py"),
		strconv.Itoa(dev), strconv.Itoa(mib), "--ready-fd", "3"}, extra...)
	cmd := exec.Command(python, args...)
	cmd.Env = append(os.Environ(), f.Env()...)
	cmd.ExtraFiles = []*os.File{w}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatalf("gputest: start holder: %v", err)
	}
	t.Cleanup(func() {
		// Errors mean the test (or a reaper of its own) got there first.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if _, err := readReady(r, readyTimeout); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("gputest: holder of GPU %d: %v\n%s", dev, err, &stderr)
	}
	return cmd
}

// readReady reads the "<pid>\n" line with which a holder reports that it
// holds its device (holder.py --ready-fd, or holder.escape's return value
// printed by a kernel) and returns the pid. It fails on EOF and after
// timeout.
func readReady(r *os.File, timeout time.Duration) (int, error) {
	if err := r.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, fmt.Errorf("wait for holder: %w", err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("wait for holder: %w (read %q)", err, line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("wait for holder: bad ready line %q", line)
	}
	return pid, nil
}
