package main

// The real-GPU check (issue 4): a supervised process tree that holds about
// 10 GiB of GPU memory, 4 GiB in its main process and 3 GiB in each of two
// setsid'd children that ignore SIGTERM, is stopped through the supervisor;
// nvidia-smi before, during and after shows the memory taken and given
// back, and the supervisor's own NVML check says so in its log.
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
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
)

// gpuRig is where the check runs: a real GPU read with nvidia-smi, or the
// fake NVML read through go-nvml.
type gpuRig struct {
	python string
	args   []string                    // extra arguments of torch_load.py
	env    []string                    // for the supervisor
	used   func() (int, error)         // MiB used on GPU 0
	apps   func() (map[int]int, error) // pid → MiB of compute processes on GPU 0
	real   bool
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
	f := gputest.New(t, 1, gputest.Full)
	env := f.Env("FAKE_NVML_RELEASE_MS=700")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // this process reads the fake too, with the same knobs
	}
	n, err := gpu.Open(f.Library(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	apps := func() (map[int]int, error) {
		hs, err := n.Holders()
		out := map[int]int{}
		for _, h := range hs {
			out[h.PID] = int(h.Bytes >> 20)
		}
		return out, err
	}
	return &gpuRig{python: "/usr/bin/python3", args: []string{"--fake", "--main", "0.25", "--child", "0.125"}, env: env,
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
	script := "cmd/tfgpu-kernel/testdata/gpu/torch_load.py"
	if _, err := os.Stat(script); err != nil {
		script = "testdata/gpu/torch_load.py"
	}
	script, _ = filepath.Abs(script)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conn := writeTCPConn(t, dir, "realgpu", "realgpu-check")
	ready := filepath.Join(dir, "ready.json")

	before, err := rig.used()
	if err != nil {
		t.Fatal(err)
	}
	sup := exec.Command(self, append([]string{"run", "-f", conn, "--confirm-timeout", "30s", "--",
		rig.python, script, "--ready", ready}, rig.args...)...)
	sup.Env = append(append(os.Environ(), "TFGPU_TEST_AS_COMMAND=1", "TFGPU_STATE_DIR="+filepath.Join(dir, "state"),
		"XDG_RUNTIME_DIR="+dir), rig.env...)
	var log bytes.Buffer
	sup.Stdout, sup.Stderr = &log, &log
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sup.Wait() }()
	defer func() {
		sup.Process.Kill()
		<-exited
	}()

	var load struct {
		Main     int   `json:"main"`
		Children []int `json:"children"`
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		b, err := os.ReadFile(ready)
		if err == nil && json.Unmarshal(b, &load) == nil {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("supervisor exited (%v) before the load was ready; log:\n%s", err, log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("load not ready after 5 minutes; log:\n%s", log.String())
		}
	}
	pids := append([]int{load.Main}, load.Children...)
	during, err := rig.used()
	if err != nil {
		t.Fatal(err)
	}
	appsDuring, _ := rig.apps()
	t.Logf("GPU0 memory.used before %d MiB, with the load %d MiB; load pids %v; compute apps %v", before, during, pids, appsDuring)
	want := 9 * 1024 // of the 10 GiB
	if !rig.real {
		want = 400
	}
	if during-before < want {
		t.Fatalf("the load took %d MiB, want at least %d", during-before, want)
	}

	start := time.Now()
	if err := sup.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("supervisor: %v; log:\n%s", err, log.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("supervisor still running 60 s after SIGTERM; log:\n%s", log.String())
	}
	stopped := time.Since(start)
	after, err := rig.used()
	if err != nil {
		t.Fatal(err)
	}
	appsAfter, _ := rig.apps()
	var alive, listed []int
	for _, p := range pids {
		if gpu.Alive(p) {
			alive = append(alive, p)
		}
		if _, ok := appsAfter[p]; ok {
			listed = append(listed, p)
		}
	}
	released := ""
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "GPU memory released") || strings.Contains(l, "GPU memory still held") {
			released = l
		}
	}
	figures := map[string]any{"real_gpu": rig.real, "used_before_mib": before, "used_with_load_mib": during,
		"used_after_mib": after, "sigterm_to_exit_ms": stopped.Milliseconds(), "supervisor_line": released,
		"alive_after": alive, "listed_after": listed}
	b, _ := json.MarshalIndent(figures, "", "  ")
	t.Logf("figures: %s", b)
	if out := os.Getenv("TFGPU_REAL_GPU_OUT"); out != "" {
		os.WriteFile(filepath.Join(out, "realgpu.json"), b, 0o644)
		os.WriteFile(filepath.Join(out, "supervisor.log"), log.Bytes(), 0o644)
	}
	if len(alive) > 0 || len(listed) > 0 {
		t.Fatalf("after the stop: alive %v, still listed by the driver %v; log:\n%s", alive, listed, log.String())
	}
	if after > before+256 {
		t.Fatalf("memory.used %d MiB after the stop, %d before: not given back; log:\n%s", after, before, log.String())
	}
	if !strings.Contains(released, "GPU memory released") || !strings.Contains(released, "GPU0") {
		t.Fatalf("the supervisor did not confirm the release through NVML; log:\n%s", log.String())
	}
}
