package oom

import (
	"strings"
	"testing"
	"time"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// a100 is one GPU of this kernel, shared: this kernel, another kernel of
// the same user, another user's process and memory held in another
// container.
func a100() GPU {
	return GPU{Index: 0, Name: "NVIDIA A100-SXM4-80GB", UUID: "GPU-5c1d7e6a-2f4b-11ee-9c3a-0242ac120002",
		Total: 80 * gib, Free: 312 * mib, Own: 12 * gib,
		Kernels:   []Kernel{{Notebook: "train.ipynb", ID: "3f2a9c1e-8b7d-4c1a-9e2f-0a1b2c3d4e5f", Idle: 2*time.Hour + 5*time.Minute, Bytes: 61*gib + gib/2}},
		Processes: []Process{{User: "bob", PID: 4242, Command: "python serve.py --port 8000", Bytes: 4 * gib}},
		Unseen:    3 * gib / 2}
}

func TestExplain(t *testing.T) {
	cases := []struct {
		name string
		v    View
		want string
	}{{
		name: "one GPU, shared, no details",
		v:    View{Framework: PyTorch, GPUs: []GPU{a100()}},
		want: `PyTorch ran out of GPU memory. Who holds it now, largest first:
GPU0 NVIDIA A100-SXM4-80GB (GPU-5c1d7e6a-2f4b-11ee-9c3a-0242ac120002): 80 GiB total, 312 MiB free
  61.5 GiB   your notebook train.ipynb (kernel 3f2a9c1e), idle 2h5m; free it with: tfgpu-kernel stop 3f2a9c1e-8b7d-4c1a-9e2f-0a1b2c3d4e5f
  12 GiB     this kernel
  4 GiB      user bob
  1.5 GiB    processes not visible here (other containers)
`,
	}, {
		name: "one GPU, shared, details allowed",
		v:    View{Framework: PyTorch, GPUs: []GPU{a100()}, Details: true},
		want: `PyTorch ran out of GPU memory. Who holds it now, largest first:
GPU0 NVIDIA A100-SXM4-80GB (GPU-5c1d7e6a-2f4b-11ee-9c3a-0242ac120002): 80 GiB total, 312 MiB free
  61.5 GiB   your notebook train.ipynb (kernel 3f2a9c1e), idle 2h5m; free it with: tfgpu-kernel stop 3f2a9c1e-8b7d-4c1a-9e2f-0a1b2c3d4e5f
  12 GiB     this kernel
  4 GiB      user bob, pid 4242: python serve.py --port 8000
  1.5 GiB    processes not visible here (other containers)
`,
	}, {
		// The second GPU: a busy kernel (no idle time) whose stop command the
		// supervisor gave (root's form, user:id), a notebook name unknown,
		// another user's figure NVML could not give, and this kernel
		// holding nothing there yet.
		name: "two GPUs",
		v: View{Framework: TensorFlow, GPUs: []GPU{a100(), {
			Index: 1, Name: "NVIDIA A100-SXM4-80GB", UUID: "GPU-9e0b3f12-2f4b-11ee-9c3a-0242ac120002",
			Total: 80 * gib, Free: 0, Own: 0,
			Kernels: []Kernel{
				{Notebook: "eda.ipynb", ID: "77d0c2aa-1b2c-4d5e-8f90-a1b2c3d4e5f6", Stop: "tfgpu-kernel stop alice:77d0c2aa-1b2c-4d5e-8f90-a1b2c3d4e5f6", Bytes: 40 * gib},
				{ID: "0c9e8d7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f", Idle: 26*time.Hour + 40*time.Minute, Bytes: 39*gib + 512*mib},
			},
			Processes: []Process{{User: "carol", PID: 777, Command: "python", Bytes: -1}},
		}}},
		want: `TensorFlow ran out of GPU memory. Who holds it now, largest first:
GPU0 NVIDIA A100-SXM4-80GB (GPU-5c1d7e6a-2f4b-11ee-9c3a-0242ac120002): 80 GiB total, 312 MiB free
  61.5 GiB   your notebook train.ipynb (kernel 3f2a9c1e), idle 2h5m; free it with: tfgpu-kernel stop 3f2a9c1e-8b7d-4c1a-9e2f-0a1b2c3d4e5f
  12 GiB     this kernel
  4 GiB      user bob
  1.5 GiB    processes not visible here (other containers)
GPU1 NVIDIA A100-SXM4-80GB (GPU-9e0b3f12-2f4b-11ee-9c3a-0242ac120002): 80 GiB total, 0 B free
  40 GiB     your notebook eda.ipynb (kernel 77d0c2aa); free it with: tfgpu-kernel stop alice:77d0c2aa-1b2c-4d5e-8f90-a1b2c3d4e5f6
  39.5 GiB   your kernel 0c9e8d7f, idle 1d2h; free it with: tfgpu-kernel stop 0c9e8d7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f
  0 B        this kernel
  ? MiB      user carol
`,
	}, {
		name: "nothing else holds it, PyTorch",
		v: View{Framework: PyTorch, GPUs: []GPU{{Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901",
			Total: 79*gib + 648*mib, Free: 514 * mib, Own: 78*gib + 900*mib}}},
		want: `PyTorch ran out of GPU memory. Who holds it now, largest first:
GPU0 NVIDIA H100 80GB HBM3 (GPU-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901): 79.6 GiB total, 514 MiB free
  78.8 GiB   this kernel
Nothing else holds memory on its GPU: this kernel itself used it up.
To share a GPU, start the kernel with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less memory lost to fragmentation).
`,
	}, {
		name: "nothing else holds them, TensorFlow on two GPUs",
		v: View{Framework: TensorFlow, GPUs: []GPU{
			{Index: 2, Name: "Tesla T4", UUID: "GPU-aa", Total: 15 * gib, Free: 200 * mib, Own: 14*gib + 600*mib},
			{Index: 3, Name: "Tesla T4", UUID: "GPU-bb", Total: 15 * gib, Free: 200 * mib, Own: 14*gib + 600*mib},
		}},
		want: `TensorFlow ran out of GPU memory. Who holds it now, largest first:
GPU2 Tesla T4 (GPU-aa): 15 GiB total, 200 MiB free
  14.5 GiB   this kernel
GPU3 Tesla T4 (GPU-bb): 15 GiB total, 200 MiB free
  14.5 GiB   this kernel
Nothing else holds memory on its GPUs: this kernel itself used it up.
To share a GPU, start the kernel with TF_FORCE_GPU_ALLOW_GROWTH=true (TensorFlow then takes GPU memory as it needs it, not all at start).
`,
	}, {
		name: "nothing else holds it, JAX",
		v:    View{Framework: JAX, GPUs: []GPU{{Index: 0, Name: "NVIDIA L4", Total: 22 * gib, Free: 5 * gib, Own: 16*gib + 512*mib}}},
		want: `JAX ran out of GPU memory. Who holds it now, largest first:
GPU0 NVIDIA L4: 22 GiB total, 5 GiB free
  16.5 GiB   this kernel
Nothing else holds memory on its GPU: this kernel itself used it up.
To share a GPU, start the kernel with XLA_PYTHON_CLIENT_PREALLOCATE=false (JAX then takes GPU memory as it needs it, not 75% at start).
`,
	}, {
		// CuPy and plain CUDA have no allocator setting to suggest.
		name: "nothing else holds it, CuPy",
		v:    View{Framework: CuPy, GPUs: []GPU{{Index: 0, Total: -1, Free: -1, Own: -1}}},
		want: `CuPy ran out of GPU memory. Who holds it now, largest first:
GPU0: ? MiB total, ? MiB free
  ? MiB      this kernel
Nothing else holds memory on its GPU: this kernel itself used it up.
`,
	}, {
		name: "no GPU",
		v:    View{Framework: CUDA},
		want: "CUDA ran out of GPU memory; NVML lists no GPU for this kernel.\n",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Explain(c.v); got != c.want {
				t.Errorf("Explain:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// Names from elsewhere are the user's (a notebook's) or another user's (a
// command line): they cannot clear the screen, add lines or reverse the
// text, and long ones are cut. More than eight holders are summed on one
// line.
func TestExplainUntrustedAndMany(t *testing.T) {
	g := GPU{Index: 0, Name: "NVIDIA A100\x1b[2J", UUID: "GPU-5c1d7e6a", Total: 80 * gib, Free: 0, Own: 10 * gib,
		Kernels: []Kernel{{Notebook: "a\nGPU0 fake: 80 GiB free\x1b[31m.ipynb", ID: "k1", Bytes: 20 * gib}},
		Processes: []Process{
			{User: "mallory\u202e", PID: 6, Command: "python -c 'import torch; x = torch.empty(2**34, device=\"cuda\")' # " + strings.Repeat("A", 200), Bytes: 9 * gib},
			{User: "u1", Bytes: 8 * gib}, {User: "u2", Bytes: 7 * gib}, {User: "u3", Bytes: 6 * gib},
			{User: "u4", Bytes: 5 * gib}, {User: "u5", Bytes: 4 * gib}, {User: "u6", Bytes: 3 * gib},
			{User: "", Bytes: 2 * gib},
		},
		Unseen: -1}
	want := `The kernel ran out of GPU memory. Who holds it now, largest first:
GPU0 NVIDIA A100?[2J (GPU-5c1d7e6a): 80 GiB total, 0 B free
  20 GiB     your notebook a?GPU0 fake: 80 GiB free?[31m.ipynb (kernel k1); free it with: tfgpu-kernel stop k1
  10 GiB     this kernel
  9 GiB      user mallory?, pid 6: python -c 'import torch; x = torch.empty(2**34, device="c...
  8 GiB      user u1
  7 GiB      user u2
  6 GiB      user u3
  5 GiB      user u4
  ? MiB      4 more holders
`
	if got := Explain(View{GPUs: []GPU{g}, Details: true}); got != want {
		t.Errorf("Explain:\n%s\nwant:\n%s", got, want)
	}
}

func TestUnavailable(t *testing.T) {
	cases := []struct{ why, want string }{
		{"no NVIDIA driver: cannot load libnvidia-ml.so.1 (through the dynamic loader)",
			"GPU memory holders unknown: NVML unavailable: no NVIDIA driver: cannot load libnvidia-ml.so.1 (through the dynamic loader)\n"},
		{"NVML init failed: Driver/library version mismatch\n", "GPU memory holders unknown: NVML unavailable: NVML init failed: Driver/library version mismatch\n"},
		{"line one\nline two", "GPU memory holders unknown: NVML unavailable: line one?line two\n"},
		{"", "GPU memory holders unknown: NVML unavailable\n"},
	}
	for _, c := range cases {
		if got := Unavailable(c.why); got != c.want {
			t.Errorf("Unavailable(%q) = %q, want %q", c.why, got, c.want)
		}
	}
}

func TestIdle(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{45 * time.Second, "45s"},
		{59*time.Second + 999*time.Millisecond, "59s"},
		{time.Minute, "1m"},
		{12*time.Minute + 30*time.Second, "12m"},
		{2 * time.Hour, "2h"},
		{2*time.Hour + 5*time.Minute, "2h5m"},
		{24 * time.Hour, "1d"},
		{3*24*time.Hour + 4*time.Hour + 59*time.Minute, "3d4h"},
	}
	for _, c := range cases {
		if got := idle(c.d); got != c.want {
			t.Errorf("idle(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestStopCommand(t *testing.T) {
	cases := []struct{ id, want string }{
		{"3f2a9c1e-8b7d-4c1a-9e2f-0a1b2c3d4e5f", "tfgpu-kernel stop 3f2a9c1e-8b7d-4c1a-9e2f-0a1b2c3d4e5f"},
		{"alice:3f2a9c1e", "tfgpu-kernel stop alice:3f2a9c1e"},
		{"a b", "tfgpu-kernel stop 'a b'"},
		{"it's; rm -rf ~", `tfgpu-kernel stop 'it'\''s; rm -rf ~'`},
		{"", "tfgpu-kernel stop ''"},
	}
	for _, c := range cases {
		if got := StopCommand(c.id); got != c.want {
			t.Errorf("StopCommand(%q) = %q, want %q", c.id, got, c.want)
		}
	}
}
