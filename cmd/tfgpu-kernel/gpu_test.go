package main

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The binary is built as install.sh builds it, with lazy binding: go-nvml
// leaves the NVML symbols undefined until the library is loaded, so with
// BIND_NOW it would not even start on a host without the driver.
func TestBinaryStartsWithoutNVML(t *testing.T) {
	if len(testutil.HostNVML()) > 0 {
		testutil.RequireHermetic(t) // the host's driver, hidden
	}
	bin := buildInstallTestBinary(t)
	f, err := elf.Open(bin)
	testutil.NoErr(t, err)
	defer f.Close()
	for _, tag := range []elf.DynTag{elf.DT_FLAGS, elf.DT_FLAGS_1, elf.DT_BIND_NOW} {
		vals, _ := f.DynValue(tag)
		for _, v := range vals {
			if tag == elf.DT_BIND_NOW || (tag == elf.DT_FLAGS && v&uint64(elf.DF_BIND_NOW) != 0) ||
				(tag == elf.DT_FLAGS_1 && v&uint64(elf.DF_1_NOW) != 0) {
				t.Fatalf("%s is linked with immediate binding (%v = %#x)", bin, tag, v)
			}
		}
	}
	env := append(os.Environ(), "LD_LIBRARY_PATH="+t.TempDir(), "TFGPU_STATE_DIR="+testutil.PrivateDir(t))
	r := runInstallBin(t, env, bin, "ps")
	if r.code != 0 || !strings.Contains(r.stdout, "no supervised kernels") ||
		!strings.Contains(r.stdout, "GPU memory not shown: no NVIDIA driver: cannot load libnvidia-ml.so.1") {
		t.Fatalf("ps without NVML: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runInstallBin(t, env, bin, "doctor")
	if !strings.Contains(r.stdout, "ok NVML:         no NVIDIA driver") {
		t.Fatalf("doctor without NVML: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// doctor's NVML part: driver, GPUs, and persistence mode, which is a
// problem when off, with the command that turns it on.
func TestDoctorNVML(t *testing.T) {
	bin := buildInstallTestBinary(t)
	f := gputest.New(t, 2, gputest.Full)
	env := append(append(os.Environ(), "TFGPU_STATE_DIR="+testutil.PrivateDir(t)), f.Env()...)
	r := runInstallBin(t, env, bin, "doctor")
	for _, want := range []string{"ok NVML:         driver 999.99-fake, 2 GPU(s)",
		"ok GPU0:         Fake NVIDIA H200, 141 GiB, GPU-fa4e0000-0000-0000-0000-000000000000, persistence mode on",
		"ok GPU1:"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("doctor lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	r = runInstallBin(t, append(env, "FAKE_NVML_PERSISTENCE=0"), bin, "doctor")
	if r.code != 1 || !strings.Contains(r.stdout, "!! GPU1:         Fake NVIDIA H200") ||
		!strings.Contains(r.stdout, "persistence mode off") || !strings.Contains(r.stdout, "fix:          nvidia-smi -i 1 -pm 1") {
		t.Fatalf("doctor with persistence mode off: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// ps: one row per recorded kernel, its pids and GPU memory per device, as
// a table and as JSON; a kernel whose supervisor is gone is "dirty".
func TestPs(t *testing.T) {
	bin := buildInstallTestBinary(t)
	f := gputest.New(t, 2, gputest.Full)
	holder := f.Hold(t, 1, 768, "--setsid") // a process group of its own, as a kernel has
	stateDir := testutil.PrivateDir(t)
	kernelStart, err := proc.StartTime(holder.Process.Pid)
	testutil.NoErr(t, err)
	// A kernel recorded by a dead supervisor whose process group leader
	// (the "kernel") is the holder: ps finds it through /proc.
	st, _ := json.Marshal(record.State{KernelID: "5b2c1e7a-ps", SupervisorPID: 1 << 30, KernelPID: holder.Process.Pid,
		KernelStart: kernelStart, Containment: "proc", Session: "train.ipynb",
		Started: time.Now().Add(-time.Minute)})
	testutil.NoErr(t, os.WriteFile(filepath.Join(stateDir, "5b2c1e7a-ps.json"), st, 0o600))
	env := append(append(os.Environ(), "TFGPU_STATE_DIR="+stateDir), f.Env()...)
	r := runInstallBin(t, env, bin, "ps", "--json")
	var rows []record.KernelStatus
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != 0 || len(rows) != 1 {
		t.Fatalf("ps --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	k := rows[0]
	if k.State != record.StateDirty || len(k.PIDs) != 1 || k.PIDs[0] != holder.Process.Pid || len(k.GPU) != 1 ||
		k.GPU[0].Index != 1 || k.GPU[0].UsedBytes != 768<<20 || !strings.HasPrefix(k.GPU[0].UUID, "GPU-") {
		t.Fatalf("ps --json row: %+v", k)
	}
	r = runInstallBin(t, env, bin, "ps")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "KERNEL") ||
		!strings.Contains(lines[1], "5b2c1e7a  train.ipynb  root") || !strings.Contains(lines[0], "NOTEBOOK     USER") || !strings.Contains(lines[1], "dirty") ||
		!strings.HasSuffix(lines[1], "GPU1 768 MiB") {
		t.Fatalf("ps: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runInstallBin(t, env, bin, "ps", "extra"); r.code != 2 {
		t.Fatalf("ps extra: exit %d", r.code)
	}
	if r := runInstallBin(t, env, bin, "ps", "--format", "yaml"); r.code != 2 || !strings.Contains(r.stderr, "give table, json or prometheus") {
		t.Fatalf("ps --format yaml: exit %d: %s", r.code, r.stderr)
	}
	// The same row for Prometheus: a dead supervisor's kernel has no
	// execution state (no busy or idle figure), its GPU memory is there.
	r = runInstallBin(t, env, bin, "ps", "--format", "prometheus")
	fams := testutil.ParseProm(t, r.stdout)
	labels := map[string]string{"kernel_id": "5b2c1e7a-ps", "notebook": "train.ipynb", "user": "root"}
	if v, ok := testutil.PromValue(fams, "tfgpu_kernel_gpu_memory_bytes", map[string]string{"kernel_id": "5b2c1e7a-ps", "gpu": "1"}); r.code != 0 || !ok || v != 768<<20 {
		t.Fatalf("ps --format prometheus: exit %d, GPU1 %v (found %v)\n%s%s", r.code, v, ok, r.stdout, r.stderr)
	}
	if _, ok := testutil.PromValue(fams, "tfgpu_kernel_info", map[string]string{"kernel_id": "5b2c1e7a-ps", "state": "dirty", "execution_state": "unknown"}); !ok {
		t.Errorf("no tfgpu_kernel_info for the dirty kernel:\n%s", r.stdout)
	}
	if v, ok := testutil.PromValue(fams, "tfgpu_kernel_processes", labels); !ok || v != 1 {
		t.Errorf("tfgpu_kernel_processes = %v (found %v)", v, ok)
	}
	for _, m := range []string{"tfgpu_kernel_busy", "tfgpu_kernel_idle_seconds"} {
		if _, ok := testutil.PromValue(fams, m, labels); ok {
			t.Errorf("%s given for a kernel whose execution state is unknown", m)
		}
	}
}

// stop of a kernel whose supervisor is gone kills its tree and confirms
// through NVML that its memory is back, or says what still holds it and
// exits 1.
func TestStopConfirmsGPU(t *testing.T) {
	bin := buildInstallTestBinary(t)
	for _, c := range []struct {
		release, timeout string
		code             int
		want             string
	}{
		{"300", "10s", 0, "GPU memory released: GPU0 512 MiB (NVML, by pid,"},
		{"-1", "1s", 1, "GPU memory still held 1s after the kill: GPU0: pid "},
	} {
		f := gputest.New(t, 1, gputest.Full)
		holder := f.Hold(t, 0, 512, "--setsid")
		start, err := proc.StartTime(holder.Process.Pid)
		testutil.NoErr(t, err)
		stateDir := testutil.PrivateDir(t)
		st, _ := json.Marshal(record.State{KernelID: "dead-gpu", SupervisorPID: 1 << 30, KernelPID: holder.Process.Pid,
			KernelStart: start, Containment: "proc"})
		testutil.NoErr(t, os.WriteFile(filepath.Join(stateDir, "dead-gpu.json"), st, 0o600))
		env := append(append(os.Environ(), "TFGPU_STATE_DIR="+stateDir), f.Env("FAKE_NVML_RELEASE_MS="+c.release)...)
		r := runInstallBin(t, env, bin, "stop", "--confirm-timeout", c.timeout, "dead-gpu")
		out := r.stdout + r.stderr
		if r.code != c.code || !strings.Contains(out, "stopped kernel root:dead-gpu: supervisor gone; 1 processes killed") ||
			!strings.Contains(out, c.want) {
			t.Fatalf("release %s: stop exit %d, want %d and %q:\n%s\ncalls:\n%s\nctx: %v", c.release, r.code, c.code, c.want, out, strings.Join(f.Calls(t), "\n"), ctxFiles(f.Root))
		}
	}
}

// BenchmarkPs times `tfgpu-kernel ps --json` with 20 kernels, each a
// process group of its own holding a fake GPU (issue 5: under 200 ms):
//
//	go test ./cmd/tfgpu-kernel -run '^$' -bench Ps -benchtime 20x
func BenchmarkPs(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "tfgpu-kernel")
	if out, err := exec.Command("go", "build", "-ldflags=-extldflags=-Wl,-z,lazy", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	f := gputest.New(b, 2, gputest.Full)
	stateDir := testutil.PrivateDir(b)
	for i := range 20 {
		h := f.Hold(b, i%2, 256, "--setsid")
		start, err := proc.StartTime(h.Process.Pid)
		testutil.NoErr(b, err)
		id := fmt.Sprintf("bench-%02d", i)
		st, _ := json.Marshal(record.State{KernelID: id, SupervisorPID: os.Getpid(), KernelPID: h.Process.Pid,
			KernelStart: start, Containment: "proc", Started: time.Now(), Phase: record.PhaseRunning})
		testutil.NoErr(b, os.WriteFile(filepath.Join(stateDir, id+".json"), st, 0o600))
	}
	env := append(append(os.Environ(), "TFGPU_STATE_DIR="+stateDir), f.Env()...)
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(bin, "ps", "--json")
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil || strings.Count(string(out), `"kernel_id"`) != 20 {
			b.Fatalf("ps: %v\n%s", err, out)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/ps")
}

// A GPU check a supervisor left unfinished (shutdown ran into Jupyter's
// SIGTERM) is a doctor problem while the driver still holds the memory,
// and is tidied away once it does not.
func TestDoctorUnfinishedGPUCheck(t *testing.T) {
	bin := buildInstallTestBinary(t)
	f := gputest.New(t, 1, gputest.Full)
	h := f.Hold(t, 0, 300)
	h.Process.Kill()
	h.Wait()
	stateDir := testutil.PrivateDir(t)
	for id, pid := range map[string]int{"held": h.Process.Pid, "released": 1 << 30} {
		b, _ := json.Marshal(gpu.Old{PIDs: []int{pid}, By: gpu.ByPID})
		testutil.NoErr(t, os.WriteFile(filepath.Join(stateDir, id+".gpu"), b, 0o600))
	}
	env := append(append(os.Environ(), "TFGPU_STATE_DIR="+stateDir), f.Env("FAKE_NVML_RELEASE_MS=-1")...)
	r := runInstallBin(t, env, bin, "doctor")
	want := fmt.Sprintf("!! GPU check:    kernel held's last tree is dead but the driver still holds: GPU0: pid %d holds 300 MiB", h.Process.Pid)
	if r.code != 1 || !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "kernel released") {
		t.Fatalf("doctor: exit %d, want %q\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "released.gpu")); !os.IsNotExist(err) {
		t.Fatalf("the finished check was not tidied away: %v", err)
	}
}

func ctxFiles(root string) []string {
	m, _ := filepath.Glob(filepath.Join(root, "ctx", "*"))
	return m
}
