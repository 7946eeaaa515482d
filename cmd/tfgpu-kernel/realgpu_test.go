package main

// The real-GPU check (issue 4): a supervised process tree that holds about
// 10 GiB of GPU memory, 4 GiB in its main process and 3 GiB in each of two
// setsid'd children that ignore SIGTERM, is stopped through the supervisor,
// once by SIGTERM and once by the supervisor itself over an 8 GiB GPU
// memory limit; nvidia-smi before, during and after shows the memory taken
// and given back, and the supervisor's own NVML check says so in its log.
// It also times NVML's start and one listing of the GPU's processes. For
// issue 37: PyTorch's own out-of-memory error is recognised (oom.Match),
// with another holder NVML lists, and two kernels started at once with
// --gpus auto get GPUs NVML lists, different ones where there is a choice.
//
// It needs neither Go nor Jupyter on the GPU host: build the test binary
// here and carry it with testdata/gpu/torch_load.py (PyTorch only):
//
//	go test -c -ldflags=-extldflags=-Wl,-z,lazy -o tfgpu-realgpu.test ./cmd/tfgpu-kernel
//	# on the GPU host, in a checkout (or copy) of the repository:
//	TFGPU_REAL_GPU=1 ./tfgpu-realgpu.test -test.run TestRealGPU -test.v
//
// TFGPU_REAL_GPU_PYTHON names the Python with PyTorch (default python3) and
// TFGPU_REAL_GPU_OUT a directory for the figures as JSON. The test binary
// plays the tfgpu-kernel command itself (TestMain), so the supervisor under
// test is this very build.
//
// Without TFGPU_REAL_GPU the same check runs against the fake NVML, with
// the load holding fake devices, so the harness is known to work before it
// is carried to a GPU.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/oom"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// gpuRig is where the check runs: a real GPU read with nvidia-smi, or the
// fake NVML read through go-nvml.
type gpuRig struct {
	python  string
	args    []string                    // extra arguments of torch_load.py
	library string                      // NVML for this process: "" the driver's
	env     []string                    // for the supervisor
	used    func() (int, error)         // MiB used on GPU 0
	apps    func() (map[int]int, error) // pid → MiB of compute processes on GPU 0
	real    bool
}

func realRig(t *testing.T) *gpuRig {
	py := os.Getenv("TFGPU_REAL_GPU_PYTHON")
	if py == "" {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import torch; assert torch.cuda.is_available(), 'no CUDA'").CombinedOutput(); err != nil {
		t.Fatalf("TFGPU_REAL_GPU=1 needs %s with PyTorch and CUDA: %v\n%s", py, err, out)
	}
	smi := func(args ...string) ([][]string, error) {
		out, err := exec.Command("nvidia-smi", args...).Output()
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi %s: %w", strings.Join(args, " "), err)
		}
		var rows [][]string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				rows = append(rows, strings.Split(strings.ReplaceAll(l, " ", ""), ","))
			}
		}
		return rows, nil
	}
	uuid := ""
	if rows, err := smi("-i", "0", "--query-gpu=uuid", "--format=csv,noheader"); err == nil && len(rows) == 1 {
		uuid = rows[0][0]
	}
	return &gpuRig{python: py, real: true, env: []string{"CUDA_VISIBLE_DEVICES=0"},
		used: func() (int, error) {
			rows, err := smi("-i", "0", "--query-gpu=memory.used", "--format=csv,noheader,nounits")
			if err != nil || len(rows) != 1 {
				return 0, fmt.Errorf("memory.used: %v %q", err, rows)
			}
			return strconv.Atoi(rows[0][0])
		},
		apps: func() (map[int]int, error) {
			rows, err := smi("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")
			if err != nil {
				return nil, err
			}
			out := map[int]int{}
			for _, r := range rows {
				if len(r) == 3 && r[0] == uuid {
					pid, _ := strconv.Atoi(r[1])
					mib, _ := strconv.Atoi(r[2])
					out[pid] = mib
				}
			}
			return out, nil
		}}
}

func fakeRig(t *testing.T) *gpuRig {
	testutil.Integration(t)              // a Python load and the supervisor
	f := gputest.New(t, 2, gputest.Full) // two: --gpus auto has a choice
	env := f.Env("FAKE_NVML_RELEASE_MS=700")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // this process reads the fake too, with the same knobs
	}
	n, err := gpu.Open(f.Library(), "")
	testutil.NoErr(t, err)
	t.Cleanup(n.Close)
	apps := func() (map[int]int, error) {
		hs, err := n.Holders()
		out := map[int]int{}
		for _, h := range hs {
			out[h.PID] = int(h.Bytes >> 20)
		}
		return out, err
	}
	return &gpuRig{python: "/usr/bin/python3", library: f.Library(), args: []string{"--fake", "--main", "0.25", "--child", "0.125"}, env: env,
		apps: apps,
		used: func() (int, error) {
			m, err := apps()
			sum := 0
			for _, mib := range m {
				sum += mib
			}
			return sum, err
		}}
}

func TestRealGPU(t *testing.T) {
	var rig *gpuRig
	if os.Getenv("TFGPU_REAL_GPU") == "1" {
		rig = realRig(t)
	} else {
		rig = fakeRig(t)
	}
	figures := map[string]any{"real_gpu": rig.real}
	out := os.Getenv("TFGPU_REAL_GPU_OUT")
	defer func() {
		b, _ := json.MarshalIndent(figures, "", "  ")
		t.Logf("figures: %s", b)
		if out != "" {
			os.WriteFile(filepath.Join(out, "realgpu.json"), b, 0o644)
		}
	}()
	logTo := func(name string, log *testutil.Buffer) {
		if out != "" {
			os.WriteFile(filepath.Join(out, name+".log"), []byte(log.String()), 0o644)
		}
	}

	// Stopped from outside: SIGTERM, as Jupyter's shutdown ends with.
	t.Run("sigterm", func(t *testing.T) {
		f := map[string]any{}
		figures["sigterm"] = f
		load := startLoad(t, rig)
		defer logTo("sigterm", &load.log)
		pids := load.waitReady(t)
		during, err := rig.used()
		testutil.NoErr(t, err)
		appsDuring, _ := rig.apps()
		t.Logf("GPU0 memory.used before %d MiB, with the load %d MiB; load pids %v; compute apps %v", load.before, during, pids, appsDuring)
		f["used_before_mib"], f["used_with_load_mib"] = load.before, during
		want := 9 * 1024 // of the 10 GiB
		if !rig.real {
			want = 400
		}
		if during-load.before < want {
			t.Fatalf("the load took %d MiB, want at least %d", during-load.before, want)
		}
		// What one NVML sample costs with the load held: what the GPU
		// memory limit pays at each sample and ps for each call.
		measureNVML(t, rig, f)

		start := time.Now()
		testutil.NoErr(t, load.sup.Process.Signal(syscall.SIGTERM))
		if err := load.wait(t, 60*time.Second); err != nil {
			t.Fatalf("supervisor: %v; log:\n%s", err, load.log.String())
		}
		f["sigterm_to_exit_ms"] = time.Since(start).Milliseconds()
		load.checkGone(t, rig, f)
	})

	// Stopped by the supervisor itself: the tree grows past its GPU memory
	// limit (main 4 GiB, then 3 GiB per child: 7 GiB is under 8, under
	// the 90 % warning too; 10 GiB is over).
	t.Run("limit", func(t *testing.T) {
		f := map[string]any{}
		figures["limit"] = f
		limit := "8G"
		if !rig.real {
			limit = "448M" // of 256 + 2×128 MiB
		}
		f["limit"] = limit
		load := startLoad(t, rig, "--gpu-memory-limit", limit)
		defer logTo("limit", &load.log)
		// The supervisor parks the kernel (its tree killed, the release
		// confirmed) and stays, keeping the kernel's place for Jupyter.
		deadline := time.Now().Add(5 * time.Minute)
		for load.line("parked=true") == "" {
			select {
			case err := <-load.exited:
				load.exited <- err
				t.Fatalf("supervisor exited (%v) over the GPU memory limit; it should park the kernel and stay; log:\n%s", err, load.log.String())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("the kernel was not parked within 5 minutes; log:\n%s", load.log.String())
			}
		}
		if ready, e := os.Stat(load.ready); e == nil {
			// From the tree holding it all to the kernel parked: the
			// sample that saw it (every 5 s without a running cell), the
			// kill and the release check.
			f["ready_to_parked_ms"] = time.Since(ready.ModTime()).Milliseconds()
		}
		over := load.line("kernel stopped over its GPU memory limit")
		f["over_line"] = over
		if over == "" {
			t.Fatalf("no over-the-limit line in the log:\n%s", load.log.String())
		}
		testutil.NoErr(t, load.sup.Process.Signal(syscall.SIGTERM))
		if err := load.wait(t, 60*time.Second); err != nil {
			t.Fatalf("parked supervisor after SIGTERM: %v; log:\n%s", err, load.log.String())
		}
		load.checkGone(t, rig, f)
	})

	// PyTorch's own out-of-memory error, with another process holding
	// memory (issue 37): oom.Match recognises what PyTorch raises, and
	// NVML lists the other holder, whom the cell's explanation names.
	t.Run("oom", func(t *testing.T) {
		f := map[string]any{}
		figures["oom"] = f
		ready := filepath.Join(t.TempDir(), "holder.json")
		args := []string{"--main", "2", "--children", "0"}
		if !rig.real {
			args = []string{"--fake", "--main", "0.25", "--children", "0"}
		}
		holder := exec.Command(rig.python, append([]string{testdataFile(t, "gpu/torch_load.py"), "--ready", ready}, args...)...)
		holder.Env = append(os.Environ(), rig.env...)
		testutil.NoErr(t, holder.Start())
		t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
		testutil.WaitFor(t, 5*time.Minute, "the holder to hold its memory", func() bool { _, err := os.Stat(ready); return err == nil })
		out := filepath.Join(t.TempDir(), "oom.json")
		cmd := exec.Command(rig.python, testdataFile(t, "gpu/oom_torch.py"), out)
		if !rig.real {
			cmd.Args = append(cmd.Args, "--fake")
		}
		cmd.Env = holder.Env
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("oom_torch.py: %v\n%s", err, b)
		}
		var e struct {
			Ename, Evalue, Module string
			Traceback             []string
		}
		if b, err := os.ReadFile(out); err != nil || json.Unmarshal(b, &e) != nil {
			t.Fatalf("oom_torch.py wrote %q (%v)", b, err)
		}
		fw, ok := oom.Match(e.Ename, e.Evalue, e.Traceback)
		f["ename"], f["module"], f["evalue"], f["matched"] = e.Ename, e.Module, e.Evalue, string(fw)
		if !ok || fw != oom.PyTorch {
			t.Fatalf("PyTorch's %s.%s (%q) was not recognised: %q, %v", e.Module, e.Ename, e.Evalue, fw, ok)
		}
		n, err := gpu.Open(rig.library, "")
		testutil.NoErr(t, err)
		defer n.Close()
		hs, err := n.Holders()
		testutil.NoErr(t, err)
		listed := slices.ContainsFunc(hs, func(h gpu.Holder) bool { return h.PID == holder.Process.Pid })
		f["holder_listed"] = listed
		if !listed {
			t.Errorf("NVML does not list the holder %d: %+v", holder.Process.Pid, hs)
		}
	})

	// Two kernels started at once with --gpus auto (issue 37): each one's
	// CUDA_VISIBLE_DEVICES is a UUID NVML lists, and with more than one
	// GPU (or MIG instance) to choose from they differ.
	t.Run("placement", func(t *testing.T) {
		f := map[string]any{}
		figures["placement"] = f
		dir := t.TempDir()
		self, err := os.Executable()
		testutil.NoErr(t, err)
		n, err := gpu.Open(rig.library, "")
		testutil.NoErr(t, err)
		units, err := n.Units()
		n.Close()
		if err != nil || len(units) == 0 {
			t.Fatalf("NVML's units: %v, %v", units, err)
		}
		var uuids []string
		for _, u := range units {
			uuids = append(uuids, u.UUID)
		}
		f["units"] = uuids
		var sups []*exec.Cmd
		var outs []string
		for i := range 2 {
			out := filepath.Join(dir, fmt.Sprintf("visible-%d", i))
			conn := writeTCPConn(t, dir, fmt.Sprintf("placement%d", i), "realgpu-check")
			sup := exec.Command(self, "run", "-f", conn, "--gpus", "auto", "--", rig.python, "-c",
				"import os, sys, time\nopen(sys.argv[1], 'w').write(os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)'))\ntime.sleep(600)", out)
			// Not rig.env: its CUDA_VISIBLE_DEVICES would win.
			sup.Env = append(os.Environ(), "TFGPU_TEST_AS_COMMAND=1", "TFGPU_STATE_DIR="+filepath.Join(dir, "state"), "XDG_RUNTIME_DIR="+dir)
			var log testutil.Buffer
			sup.Stdout, sup.Stderr = &log, &log
			testutil.NoErr(t, sup.Start())
			t.Cleanup(func() { sup.Process.Signal(syscall.SIGTERM); sup.Wait(); logTo(fmt.Sprintf("placement%d", i), &log) })
			sups, outs = append(sups, sup), append(outs, out)
		}
		var got []string
		for _, out := range outs {
			var b []byte
			testutil.WaitFor(t, time.Minute, "a kernel's CUDA_VISIBLE_DEVICES", func() bool { b, _ = os.ReadFile(out); return len(b) > 0 })
			got = append(got, string(b))
		}
		f["visible"] = got
		for _, v := range got {
			if !slices.Contains(uuids, v) {
				t.Errorf("a kernel's CUDA_VISIBLE_DEVICES %q is none of NVML's %v", v, uuids)
			}
		}
		if len(uuids) > 1 && got[0] == got[1] {
			t.Errorf("two kernels started at once with %d GPUs to choose from both got %s", len(uuids), got[0])
		}
	})
}

// testdataFile is the path of testdata/NAME, from the repository's root
// (where realgpu.sh runs the binary) or from this package's directory.
func testdataFile(t *testing.T, name string) string {
	t.Helper()
	for _, p := range []string{filepath.Join("cmd/tfgpu-kernel/testdata", name), filepath.Join("testdata", name)} {
		if _, err := os.Stat(p); err == nil {
			abs, _ := filepath.Abs(p)
			return abs
		}
	}
	t.Fatalf("testdata/%s not found from the working directory", name)
	return ""
}

// gpuLoad is testdata/gpu/torch_load.py run by the supervisor as its
// kernel.
type gpuLoad struct {
	sup      *exec.Cmd
	log      testutil.Buffer
	ready    string
	before   int // MiB used on GPU 0 before it started
	exited   chan error
	exitedAt time.Time
}

func startLoad(t *testing.T, rig *gpuRig, flags ...string) *gpuLoad {
	t.Helper()
	script := "cmd/tfgpu-kernel/testdata/gpu/torch_load.py"
	if _, err := os.Stat(script); err != nil {
		script = "testdata/gpu/torch_load.py"
	}
	script, _ = filepath.Abs(script)
	self, err := os.Executable()
	testutil.NoErr(t, err)
	dir := t.TempDir()
	l := &gpuLoad{ready: filepath.Join(dir, "ready.json"), exited: make(chan error, 1)}
	if l.before, err = rig.used(); err != nil {
		t.Fatal(err)
	}
	conn := writeTCPConn(t, dir, "realgpu", "realgpu-check")
	args := append([]string{"run", "-f", conn, "--confirm-timeout", "30s"}, flags...)
	args = append(append(args, "--", rig.python, script, "--ready", l.ready), rig.args...)
	l.sup = exec.Command(self, args...)
	l.sup.Env = append(append(os.Environ(), "TFGPU_TEST_AS_COMMAND=1", "TFGPU_STATE_DIR="+filepath.Join(dir, "state"),
		"XDG_RUNTIME_DIR="+dir), rig.env...)
	l.sup.Stdout, l.sup.Stderr = &l.log, &l.log
	testutil.NoErr(t, l.sup.Start())
	go func() {
		err := l.sup.Wait()
		l.exitedAt = time.Now()
		l.exited <- err
	}()
	t.Cleanup(func() {
		l.sup.Process.Kill()
		l.wait(t, time.Minute)
		// The load's processes are the supervisor's to kill; any it left
		// (a failed check) are killed here, by the pids they wrote.
		for _, p := range l.pids() {
			if gpu.Alive(p) {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	return l
}

// wait waits for the supervisor's exit; its error is kept for the next
// wait (the cleanup's).
func (l *gpuLoad) wait(t *testing.T, d time.Duration) error {
	select {
	case err := <-l.exited:
		l.exited <- err
		return err
	case <-time.After(d):
		t.Fatalf("supervisor still running after %v; log:\n%s", d, l.log.String())
		return nil
	}
}

// waitReady waits until the whole load holds its memory and returns its
// pids.
func (l *gpuLoad) waitReady(t *testing.T) []int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var load struct {
			Main     int   `json:"main"`
			Children []int `json:"children"`
		}
		if b, err := os.ReadFile(l.ready); err == nil && json.Unmarshal(b, &load) == nil {
			return append([]int{load.Main}, load.Children...)
		}
		select {
		case err := <-l.exited:
			l.exited <- err
			t.Fatalf("supervisor exited (%v) before the load was ready; log:\n%s", err, l.log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("load not ready after 5 minutes; log:\n%s", l.log.String())
		}
	}
}

// pids are those every process of the load wrote when it started.
func (l *gpuLoad) pids() []int {
	b, _ := os.ReadFile(l.ready + ".pids")
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil && p > 0 {
			pids = append(pids, p)
		}
	}
	return pids
}

// line is the last log line that holds s.
func (l *gpuLoad) line(s string) string {
	found := ""
	for _, ln := range strings.Split(l.log.String(), "\n") {
		if strings.Contains(ln, s) {
			found = ln
		}
	}
	return found
}

// checkGone checks, after the supervisor exited, that nothing of the load
// is alive or listed by the driver, that the memory is back, and that the
// supervisor confirmed the release through NVML.
func (l *gpuLoad) checkGone(t *testing.T, rig *gpuRig, f map[string]any) {
	t.Helper()
	after, err := rig.used()
	testutil.NoErr(t, err)
	appsAfter, _ := rig.apps()
	pids := l.pids()
	var alive, listed []int
	for _, p := range pids {
		if gpu.Alive(p) {
			alive = append(alive, p)
		}
		if _, ok := appsAfter[p]; ok {
			listed = append(listed, p)
		}
	}
	released := l.line("GPU memory released")
	if released == "" {
		released = l.line("GPU memory still held")
	}
	f["used_after_mib"], f["supervisor_line"], f["load_pids"] = after, released, pids
	f["alive_after"], f["listed_after"] = alive, listed
	if len(pids) != 3 {
		t.Errorf("the load wrote pids %v, want 3", pids)
	}
	if len(alive) > 0 || len(listed) > 0 {
		t.Fatalf("after the stop: alive %v, still listed by the driver %v; log:\n%s", alive, listed, l.log.String())
	}
	if after > l.before+256 {
		t.Fatalf("memory.used %d MiB after the stop, %d before: not given back; log:\n%s", after, l.before, l.log.String())
	}
	if !strings.Contains(released, "GPU memory released") || !strings.Contains(released, "GPU0") {
		t.Fatalf("the supervisor did not confirm the release through NVML; log:\n%s", l.log.String())
	}
}

// measureNVML times, in this process, NVML's start and one listing of the
// devices' processes (median of 21, with its CPU time): the cost of a GPU
// memory limit's sample and of ps, on this driver.
func measureNVML(t *testing.T, rig *gpuRig, f map[string]any) {
	t.Helper()
	start := time.Now()
	n, err := gpu.Open(rig.library, "")
	testutil.NoErr(t, err)
	defer n.Close()
	f["nvml_open_ms"] = float64(time.Since(start).Microseconds()) / 1000
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	took := make([]time.Duration, 21)
	held := 0
	for i := range took {
		s := time.Now()
		hs, err := n.Holders()
		took[i] = time.Since(s)
		testutil.NoErr(t, err)
		held = len(hs)
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	slices.Sort(took)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / time.Duration(len(took))
	f["holders_median_ms"] = float64(took[len(took)/2].Microseconds()) / 1000
	f["holders_cpu_ms"] = float64(cpu.Microseconds()) / 1000
	f["holders_listed"] = held
	t.Logf("NVML start %v ms; a listing (%d processes): median %v, CPU %v", f["nvml_open_ms"], held, took[len(took)/2], cpu)
}
