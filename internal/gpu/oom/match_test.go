package oom

import (
	"runtime"
	"strings"
	"testing"
)

// ipython is a traceback as ipykernel sends it (IPython 8, colours on): a
// rule, the header, a frame that quotes the cell's source src (numbered,
// the failing line marked), a library frame, and the exception line.
func ipython(ename, evalue, src string) []string {
	var cell strings.Builder
	cell.WriteString("Cell \x1b[0;32mIn[7], line 3\x1b[0m\n")
	for i, l := range strings.Split(src, "\n") {
		mark := "\x1b[1;32m      " + string(rune('1'+i)) + "\x1b[0m "
		if i == 2 {
			mark = "\x1b[0;32m----> 3\x1b[0m "
		}
		cell.WriteString(mark + strings.ReplaceAll(l, "=", "\x1b[38;5;241m=\x1b[39m") + "\n")
	}
	return []string{
		"\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
		"\x1b[0;31m" + ename + "\x1b[0m                          Traceback (most recent call last)",
		cell.String(),
		"File \x1b[0;32m/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py:1736\x1b[0m, in \x1b[0;36mModule._wrapped_call_impl\x1b[0;34m(self, *args, **kwargs)\x1b[0m\n" +
			"\x1b[1;32m   1734\x1b[0m     \x1b[38;5;28;01mreturn\x1b[39;00m \x1b[38;5;28mself\x1b[39m\x1b[38;5;241m.\x1b[39m_compiled_call_impl(\x1b[38;5;241m*\x1b[39margs, \x1b[38;5;241m*\x1b[39m\x1b[38;5;241m*\x1b[39mkwargs)  \x1b[38;5;66;03m# type: ignore[misc]\x1b[39;00m\n" +
			"\x1b[0;32m-> 1736\x1b[0m \x1b[38;5;28;01mreturn\x1b[39;00m \x1b[38;5;28mself\x1b[39m\x1b[38;5;241m.\x1b[39m_call_impl(\x1b[38;5;241m*\x1b[39margs, \x1b[38;5;241m*\x1b[39m\x1b[38;5;241m*\x1b[39mkwargs)\n",
		"\x1b[0;31m" + ename + "\x1b[0m: " + evalue,
	}
}

const cell = "x = torch.randn(8192, 8192, device=\"cuda\")\nmodel = Net().cuda()\ny = model(x)"

// Real messages, each quoted from the public issue named beside it; where
// a case adds to or completes what the issue shows, its comment says what.
// Jupyter's ename is the bare class name (type(e).__name__), a plain
// Python traceback prints the qualified one: both shapes are tried.
var matches = []struct {
	name          string
	ename, evalue string
	tb            []string
	want          Framework
}{
	// PyTorch 2.4+: github.com/lllyasviel/FramePack/issues/369.
	{name: "torch.OutOfMemoryError", ename: "OutOfMemoryError",
		evalue: "CUDA out of memory. Tried to allocate 30.29 GiB. GPU 0 has a total capacity of 10.74 GiB of which 3.69 GiB is free. Including non-PyTorch memory, this process has 6.68 GiB memory in use. Of the allocated memory 6.10 GiB is allocated by PyTorch, and 396.58 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
		want:   PyTorch},
	// PyTorch 1.13-2.0, capacity in parentheses: github.com/YingqianWang/iPASSR/issues/9.
	{name: "torch.cuda.OutOfMemoryError with capacity in parentheses", ename: "OutOfMemoryError",
		evalue: "CUDA out of memory. Tried to allocate 10.73 GiB (GPU 0; 8.00 GiB total capacity; 17.20 GiB already allocated; 0 bytes free; 19.15 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
		want:   PyTorch},
	// PyTorch < 1.13: github.com/daitao/SAN/issues/39.
	{name: "RuntimeError CUDA out of memory", ename: "RuntimeError",
		evalue: "CUDA out of memory. Tried to allocate 9.80 GiB (GPU 0; 14.76 GiB total capacity; 9.94 GiB already allocated; 3.89 GiB free; 160.79 MiB cached).",
		want:   PyTorch},
	// github.com/kuangliu/pytorch-cifar/issues/67, with the note PyTorch adds.
	{name: "RuntimeError CUDA error: out of memory", ename: "RuntimeError",
		evalue: "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1",
		want:   PyTorch},
	// PyTorch 2.8+: github.com/Comfy-Org/ComfyUI/issues/13210.
	{name: "torch.AcceleratorError", ename: "AcceleratorError",
		evalue: "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
		want:   PyTorch},
	// PyTorch 0.1: github.com/pytorch/pytorch/issues/465.
	{name: "cuda runtime error (2)", ename: "RuntimeError",
		evalue: "cuda runtime error (2) : out of memory at /data/users/soumith/miniconda2/conda-bld/pytorch-0.1.6_1483589222778/work/torch/lib/THC/generic/THCStorage.cu:65",
		want:   PyTorch},
	// github.com/QwenLM/Qwen3/issues/873 ("solved with enough GPU memory").
	{name: "cuBLAS could not allocate", ename: "RuntimeError",
		evalue: "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
		want:   PyTorch},
	// TensorFlow 2 through Keras: github.com/hotosm/fAIr/issues/59 (the
	// issue cuts the node name; the Hint line is TensorFlow's, as in
	// github.com/titu1994/keras-attention-augmented-convs/issues/5).
	{name: "ResourceExhaustedError graph execution", ename: "ResourceExhaustedError",
		evalue: "Graph execution error:\n\nOOM when allocating tensor with shape[16,64,64,64] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n\t [[{{node model/d...}}]]\nHint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation info. This isn't available when running in Eager mode.",
		want:   TensorFlow},
	// Several root errors: github.com/titu1994/keras-attention-augmented-convs/issues/5.
	{name: "ResourceExhaustedError root errors", ename: "ResourceExhaustedError",
		evalue: "2 root error(s) found.\n  (0) RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[32,4,4096,4096] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n\t [[{{node attention_augmentation2d_7/MatMul}}]]",
		want:   TensorFlow},
	// Eager op: github.com/faustomorales/keras-ocr/issues/195.
	{name: "ResourceExhaustedError eager", ename: "ResourceExhaustedError",
		evalue: "failed to allocate memory [Op:AddV2]", want: TensorFlow},
	// Keras 3 on TensorFlow compiles its train step with XLA
	// (keras/src/backend/tensorflow/trainer.py, one_step_on_iterator), so
	// the message is XLA's; assembled from that function's name and XLA's
	// message (github.com/jax-ml/jax/issues/13428), not captured.
	{name: "Keras 3 jit-compiled step on TensorFlow", ename: "ResourceExhaustedError",
		evalue: "Graph execution error:\n\nDetected at node StatefulPartitionedCall defined at (most recent call last):\n  File \"/opt/conda/lib/python3.11/site-packages/keras/src/backend/tensorflow/trainer.py\", line 104, in one_step_on_data\n\nOut of memory while trying to allocate 3154116608 bytes.\n\t [[{{node StatefulPartitionedCall}}]]\nHint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation info. This isn't available when running in Eager mode.\n [Op:__inference_one_step_on_iterator_4012]",
		want:   TensorFlow},
	// Another process fills the GPU before TensorFlow starts:
	// github.com/MicrosoftDocs/ml-basics/issues/12.
	{name: "TensorFlow cannot initialise CUDA", ename: "InternalError",
		evalue: "CUDA runtime implicit initialization on GPU:0 failed. Status: out of memory", want: TensorFlow},
	// Keras 3 on JAX: github.com/kokabsc/gwkokab/issues/70.
	{name: "XlaRuntimeError", ename: "XlaRuntimeError",
		evalue: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6727663616 bytes.", want: JAX},
	// With BufferAssignment's report: github.com/patrickbryant1/AFProfile/issues/8.
	{name: "XlaRuntimeError with buffer report", ename: "XlaRuntimeError",
		evalue: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4770354232 bytes.\nBufferAssignment OOM Debugging.\nBufferAssignment stats:\n             parameter allocation:  372.76MiB\n              constant allocation:    48.5KiB\n        maybe_live_out allocation:    9.64GiB\n     preallocated temp allocation:    4.44GiB\n                 total allocation:   14.44GiB\n              total fragmentation:  680.30MiB (4.60%)",
		want:   JAX},
	// github.com/onpix/LLNeRF/issues/9.
	{name: "XlaRuntimeError allocating", ename: "XlaRuntimeError",
		evalue: "RESOURCE_EXHAUSTED: Out of memory allocating 20029400304 bytes.", want: JAX},
	// Newer jaxlib names the class JaxRuntimeError (jaxlib's _jax module,
	// exported as jax.errors.JaxRuntimeError); message as above.
	{name: "JaxRuntimeError", ename: "JaxRuntimeError",
		evalue: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6727663616 bytes.", want: JAX},
	// JAX before XlaRuntimeError: github.com/sokrypton/ColabFold/issues/65.
	{name: "JAX RuntimeError", ename: "RuntimeError",
		evalue: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 14285187448 bytes.", want: JAX},
	// github.com/google-deepmind/alphafold/issues/197.
	{name: "JAX RuntimeError, older spelling", ename: "RuntimeError",
		evalue: "Resource exhausted: Out of memory while trying to allocate 12582912 bytes.", want: JAX},
	// github.com/cupy/cupy/issues/2537.
	{name: "cupy OutOfMemoryError", ename: "OutOfMemoryError",
		evalue: "Out of memory allocating 25,600,000 bytes (allocated so far: 3,635,267,072 bytes).", want: CuPy},
	// CuPy < 7: github.com/cupy/cupy/issues/1912.
	{name: "cupy OutOfMemoryError, older", ename: "OutOfMemoryError",
		evalue: "out of memory to allocate 1073741824 bytes (total 12373894656 bytes)", want: CuPy},
	// cupy_backends.cuda.api.runtime.CUDARuntimeError (cupy.cuda.runtime
	// before CuPy 8): github.com/chainer/chainer/issues/2373.
	{name: "cupy CUDARuntimeError", ename: "CUDARuntimeError",
		evalue: "cudaErrorMemoryAllocation: out of memory", want: CuPy},
	// numba: github.com/NVIDIA/cudf/issues/185.
	{name: "numba CudaAPIError", ename: "CudaAPIError",
		evalue: "[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY", want: CUDA},
	// pycuda._driver.MemoryError: github.com/cryoem-uoft/cryosparc-issues/issues/124.
	{name: "pycuda MemoryError", ename: "MemoryError",
		evalue: "cuMemAlloc failed: out of memory", want: CUDA},
	// pygpu: github.com/ndrplz/dreyeve/issues/23.
	{name: "pygpu GpuArrayException", ename: "GpuArrayException",
		evalue: "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory", want: CUDA},

	// In the traceback only. Plain Python tracebacks, as a kernel without
	// IPython or a library's log prints them, qualify the class.

	// Another error raised while handling the OOM:
	// github.com/deepbeepmeep/Wan2GP/issues/1083 (the issue cuts the
	// second exception; this one is made up).
	{name: "chained: torch.AcceleratorError first", ename: "RuntimeError", evalue: "CUDA error: unspecified launch failure",
		tb: []string{"Traceback (most recent call last):\n  File \"/opt/conda/lib/python3.11/site-packages/torch/nn/functional.py\", line 2905, in layer_norm\n    return torch.layer_norm(\n",
			"torch.AcceleratorError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n",
			"\nDuring handling of the above exception, another exception occurred:\n\n",
			"Traceback (most recent call last):\n  File \"/home/u/wgp.py\", line 5601, in generate_video\n    offloadobj.unload_all()\n",
			"RuntimeError: CUDA error: unspecified launch failure\n"},
		want: PyTorch},
	// github.com/zzw922cn/Automatic_Speech_Recognition/issues/78 (the
	// message completed from the log line; the KeyError made up).
	{name: "chained: qualified ResourceExhaustedError", ename: "KeyError", evalue: "'loss'",
		tb: []string{"Traceback (most recent call last):\n  File \"lib/python3.5/site-packages/tensorflow/python/client/session.py\", line 1361, in _do_call\n    return fn(*args)\n",
			"tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[16,1,892800,8,4,2,2] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n",
			"\nDuring handling of the above exception, another exception occurred:\n\n",
			"Traceback (most recent call last):\n  File \"timit_train.py\", line 204, in <module>\n    print(stats['loss'])\n",
			"KeyError: 'loss'\n"},
		want: TensorFlow},
	// TensorFlow 1: github.com/santi-pdp/segan/issues/42 (the SystemExit made up).
	{name: "chained: see above for traceback", ename: "SystemExit", evalue: "1",
		tb: []string{"ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[100,4096,32]\n",
			"\nThe above exception was the direct cause of the following exception:\n\n",
			"SystemExit: 1\n"},
		want: TensorFlow},
	// github.com/google-deepmind/alphafold/issues/1023 (the ValueError made up).
	{name: "chained: qualified XlaRuntimeError", ename: "ValueError", evalue: "no prediction",
		tb: []string{"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 bytes.\n",
			"\nDuring handling of the above exception, another exception occurred:\n\n", "ValueError: no prediction\n"},
		want: JAX},
	// github.com/cupy/cupy/pull/314, under the module CuPy 8 moved it to.
	{name: "chained: qualified CUDARuntimeError", ename: "ValueError", evalue: "x",
		tb:   []string{"cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorMemoryAllocation: out of memory\n", "\nThe above exception was the direct cause of the following exception:\n\n", "ValueError: x\n"},
		want: CuPy},
	// An IPython-coloured exception line inside the traceback, class
	// name split from its message by escapes: github.com/pytorch/pytorch/issues/59778.
	{name: "chained: coloured", ename: "NameError", evalue: "name 'retry' is not defined",
		tb: append(ipython("OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total capacity; 781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved in total by PyTorch)", cell),
			"\nDuring handling of the above exception, another exception occurred:\n", "\x1b[0;31mNameError\x1b[0m: name 'retry' is not defined"),
		want: PyTorch},
	// An OSC 8 hyperlink (IPython 9 links file names) around the name.
	{name: "hyperlinked", ename: "ValueError", evalue: "x",
		tb:   []string{"\x1b]8;;https://pytorch.org\x1b\\torch\x1b]8;;\x1b\\.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n", "\nDuring handling of the above exception, another exception occurred:\n", "ValueError: x"},
		want: PyTorch},
}

// Errors that are not a GPU running out of memory.
var misses = []struct {
	name          string
	ename, evalue string
	tb            []string
}{
	{name: "Python MemoryError", ename: "MemoryError", evalue: ""},
	// numpy: github.com/tensorflow/tensorflow/issues/45238.
	{name: "numpy cannot allocate", ename: "_ArrayMemoryError",
		evalue: "Unable to allocate 184. MiB for an array with shape (64, 26, 26, 3, 371) and data type float32"},
	{name: "numpy as MemoryError", ename: "MemoryError",
		evalue: "Unable to allocate 184. MiB for an array with shape (64, 26, 26, 3, 371) and data type float32"},
	// github.com/harishanand95/diffusers/issues/8.
	{name: "PyTorch host allocator", ename: "RuntimeError",
		evalue: "[enforce fail at C:\\actions-runner\\_work\\pytorch\\pytorch\\builder\\windows\\pytorch\\c10\\core\\impl\\alloc_cpu.cpp:81] data. DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes."},
	// github.com/mxfold/mxfold2/issues/20.
	{name: "PyTorch host allocator, Linux", ename: "RuntimeError",
		evalue: "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 132426121216 bytes. Error code 12 (Cannot allocate memory)"},
	// PyTorch's wording for CUDA errors (c10/cuda/CUDAException.cpp).
	{name: "device-side assert", ename: "RuntimeError",
		evalue: "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."},
	{name: "illegal memory access", ename: "RuntimeError",
		evalue: "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"},
	{name: "illegal memory access, AcceleratorError", ename: "AcceleratorError",
		evalue: "CUDA error: an illegal memory access was encountered"},
	{name: "numba illegal address", ename: "CudaAPIError",
		evalue: "[700] Call to cuMemcpyDtoH results in UNKNOWN_CUDA_ERROR"},
	{name: "TensorFlow InvalidArgumentError", ename: "InvalidArgumentError",
		evalue: "Graph execution error:\n\nDetected at node 'sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits' defined at (most recent call last):\nReceived a label value of 10 which is outside the valid range of [0, 10).  Label values: 3 7 10"},
	// On the host: github.com/tensorflow/tensorflow/issues/45238.
	{name: "TensorFlow OOM on the CPU", ename: "ResourceExhaustedError",
		evalue: "OOM when allocating tensor with shape[1,416,416,3] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu"},
	// TensorFlow's other initialisation failure: github.com/tensorflow/tensorflow/issues/48558.
	{name: "TensorFlow devices busy", ename: "InternalError",
		evalue: "CUDA runtime implicit initialization on GPU:0 failed. Status: all CUDA-capable devices are busy or unavailable"},
	// A TPU's memory: github.com/pytorch/xla/issues/9524.
	{name: "XLA on TPU", ename: "RuntimeError",
		evalue: "Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space vmem."},
	// XLA on the host: github.com/netket/netket/issues/711.
	{name: "XLA request on the CPU", ename: "RuntimeError",
		evalue: "Resource exhausted: Failed to allocate request for 55.97GiB (60096009848B) on device ordinal 0"},
	// github.com/haoheliu/AudioLDM2/issues/20.
	{name: "Apple MPS", ename: "RuntimeError",
		evalue: "MPS backend out of memory (MPS allocated: 18.02 GB, other allocations: 107.10 MB, max allowed: 18.13 GB). Tried to allocate 4.50 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure)."},
	{name: "KeyboardInterrupt", ename: "KeyboardInterrupt", evalue: "",
		tb: ipython("KeyboardInterrupt", "", cell)},
	{name: "NameError", ename: "NameError", evalue: "name 'torch' is not defined",
		tb: ipython("NameError", "name 'torch' is not defined", cell)},
	{name: "user's exception mentions memory", ename: "ValueError",
		evalue: "not enough memory in the replay buffer: need 4096 entries, have 1024"},
	{name: "user's own class", ename: "MemoryBudgetExceeded",
		evalue: "model needs 12 GiB of memory, budget is 8 GiB"},
	// A framework's phrase counts only on the framework's classes.
	{name: "user's exception quotes PyTorch", ename: "ValueError", evalue: "CUDA out of memory"},
	{name: "user's exception quotes TensorFlow", ename: "AssertionError", evalue: "OOM when allocating tensor"},
	// The cell's source, quoted by the traceback, tests for an OOM.
	{name: "source line quotes OOM", ename: "NameError", evalue: "name 'retry' is not defined",
		tb: ipython("NameError", "name 'retry' is not defined",
			"try:\n    y = model(x)\nexcept RuntimeError as e:  # torch.OutOfMemoryError: CUDA out of memory\n    if \"CUDA out of memory\" in str(e): retry()")},
	{name: "plain source line quotes OOM", ename: "NameError", evalue: "name 'retry' is not defined",
		tb: []string{"Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    if \"CUDA_ERROR_OUT_OF_MEMORY\" in msg: retry()\n", "NameError: name 'retry' is not defined\n"}},
	// Hint and node lines inside a TensorFlow message are no exceptions.
	{name: "TensorFlow hint line", ename: "InvalidArgumentError", evalue: "x",
		tb: []string{"InvalidArgumentError: indices[3] = 12 is not in [0, 10)\nHint: OOM when allocating tensor? no.\n"}},
	{name: "empty", ename: "", evalue: ""},
}

func TestMatch(t *testing.T) {
	for _, c := range matches {
		t.Run(c.name, func(t *testing.T) {
			tb := c.tb
			if tb == nil {
				tb = ipython(c.ename, c.evalue, cell)
			}
			if got, ok := Match(c.ename, c.evalue, tb); !ok || got != c.want {
				t.Errorf("Match = %q, %v; want %q", got, ok, c.want)
			}
			// The traceback alone says it too, as Python prints it.
			if c.tb == nil {
				plain := []string{"Traceback (most recent call last):\n  File \"/home/u/x.py\", line 3, in <module>\n    y = model(x)\n", c.ename + ": " + c.evalue + "\n"}
				if got, ok := Match("Exception", "wrapped", plain); !ok || got != c.want {
					t.Errorf("traceback only: Match = %q, %v; want %q", got, ok, c.want)
				}
			}
		})
	}
	for _, c := range misses {
		t.Run("not/"+c.name, func(t *testing.T) {
			tb := c.tb
			if tb == nil {
				tb = ipython(c.ename, c.evalue, cell)
			}
			if got, ok := Match(c.ename, c.evalue, tb); ok {
				t.Errorf("Match = %q, want no match", got)
			}
		})
	}
}

// Qualified names settle what the message alone would not.
func TestMatchQualified(t *testing.T) {
	cases := []struct {
		name, line string
		want       Framework
	}{
		{"torch", "torch.OutOfMemoryError: some future wording", PyTorch},
		{"torch.cuda", "torch.cuda.OutOfMemoryError: some future wording", PyTorch},
		{"cupy", "cupy.cuda.memory.OutOfMemoryError: some future wording", CuPy},
		{"pycuda", "pycuda._driver.MemoryError: some future wording", CUDA},
		{"cupy driver", "cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_OUT_OF_MEMORY: out of memory", CuPy},
		{"builtins MemoryError", "MemoryError: some future wording", ""},
		{"another OutOfMemoryError", "mylib.OutOfMemoryError: some future wording", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Match("ValueError", "x", []string{c.line + "\n", "\nDuring handling of the above exception, another exception occurred:\n", "ValueError: x"})
			if ok != (c.want != "") || got != c.want {
				t.Errorf("Match = %q, %v; want %q", got, ok, c.want)
			}
		})
	}
}

// Match looks at Budget bytes of evalue and traceback, from their start,
// and no further: an OOM that ends on the last byte is seen, one a byte
// later is not.
func TestMatchBudget(t *testing.T) {
	const phrase = "CUDA out of memory"
	const line = "OutOfMemoryError: " + phrase
	for _, c := range []struct {
		name string
		in   func(past int) (ename, evalue string, tb []string) // the OOM ends past bytes after the budget
	}{
		{"evalue", func(past int) (string, string, []string) {
			return "RuntimeError", strings.Repeat("x", Budget-len(phrase)+past) + phrase, nil
		}},
		{"evalue and traceback share it", func(past int) (string, string, []string) {
			return "ValueError", strings.Repeat("x", Budget-1-len(line)+past), []string{line}
		}},
		{"each entry costs a byte", func(past int) (string, string, []string) {
			return "ValueError", "", append(make([]string, Budget-1-len(line)+past), line)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, ok := Match(c.in(0)); !ok {
				t.Error("OOM ending at the budget not seen")
			}
			if _, ok := Match(c.in(1)); ok {
				t.Error("OOM one byte past the budget seen")
			}
		})
	}
}

// An attacker-sized traceback costs what Budget does. Measured in bytes
// allocated (runtime.MemStats), which does not depend on the machine's
// speed: a terabyte of coloured exception lines (a million references to
// one MiB) costs Match under 1 MiB, as does a single MiB.
func TestMatchAttackerSized(t *testing.T) {
	mib := strings.Repeat("\x1b[0;31mOutOfMemoryError: x\n", 1<<20/24)
	huge := make([]string, 1<<20)
	for i := range huge {
		huge[i] = mib
	}
	for _, c := range []struct {
		name string
		tb   []string
	}{{"a MiB", huge[:1]}, {"a terabyte", huge}} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, ok := Match("ValueError", "y", c.tb)
			runtime.ReadMemStats(&after)
			if ok {
				t.Error("matched")
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
				t.Errorf("Match allocated %d bytes, want at most 1 MiB", n)
			}
		})
	}
}

func TestExceptionLine(t *testing.T) {
	cases := []struct {
		line, name, msg string
		ok              bool
	}{
		{"OutOfMemoryError: CUDA out of memory.", "OutOfMemoryError", "CUDA out of memory.", true},
		{"torch.cuda.OutOfMemoryError: x", "torch.cuda.OutOfMemoryError", "x", true},
		{"GpuArrayException: x", "GpuArrayException", "x", true},
		{"MemoryError", "MemoryError", "", true},
		{"MemoryError:", "MemoryError", "", true},
		{"ResourceExhaustedError (see above for traceback): OOM", "ResourceExhaustedError", "OOM", true},
		{"_ArrayMemoryError: Unable", "_ArrayMemoryError", "Unable", true},
		{"NameError                                 Traceback (most recent call last)", "", "", false},
		{"    raise OutOfMemoryError: x", "", "", false},
		{"----> 3 torch.OutOfMemoryError: x", "", "", false},
		{"Hint: If you want to see a list of allocated tensors", "", "", false},
		{"KeyboardInterrupt: ", "", "", false},
		{"torch..OutOfMemoryError: x", "", "", false},
		{".OutOfMemoryError: x", "", "", false},
		{"2Error: x", "", "", false},
		{"torch.2Error: x", "", "", false},
		{"OutOfMemoryError:x", "", "", false},
		{"", "", "", false},
	}
	for _, c := range cases {
		name, at, ok := exceptionLine(c.line)
		if ok != c.ok || name != c.name || ok && c.line[at:] != c.msg {
			t.Errorf("exceptionLine(%q) = %q, %d, %v; want %q, %q, %v", c.line, name, at, ok, c.name, c.msg, c.ok)
		}
	}
}

func TestStripANSI(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", "plain"},
		{"\x1b[0;31mOutOfMemoryError\x1b[0m: x", "OutOfMemoryError: x"},
		{"\x1b[38;5;241m=\x1b[39m", "="},
		{"\x1b[1;32m   1734\x1b[0m", "   1734"},
		{"\x1b]8;;file:///x.py\x1b\\x.py\x1b]8;;\x1b\\:3", "x.py:3"},
		{"\x1b]0;title\x07rest", "rest"},
		{"\x1b]8;;unterminated\nnext line", "\nnext line"},
		{"\x1b(Bx", "x"},
		{"\x1b[", ""},
		{"end\x1b", "end"},
	}
	for _, c := range cases {
		if got := stripANSI(c.in); got != c.want {
			t.Errorf("stripANSI(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
