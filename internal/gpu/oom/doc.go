// Package oom recognises a GPU out-of-memory error in a Jupyter cell's
// error reply and writes the short text that tells the user who holds the
// GPU's memory. The supervisor calls Match on every verified error message
// of its kernel's iopub, and Explain (or Unavailable, when NVML is absent)
// on a match (wrapper/oom.go, docs/design.md#a-gpu-out-of-memory-error-explained).
//
// # What it owns
//
// Match(ename, evalue, traceback) says whether an error reply's content is
// a GPU out-of-memory error, and whose (TensorFlow, PyTorch, JAX, CuPy or
// plain CUDA). It recognises:
//
//   - TensorFlow: ResourceExhaustedError (also qualified, as
//     tensorflow.python.framework.errors_impl.ResourceExhaustedError)
//     with "OOM when allocating" or "failed to allocate memory" in its
//     message, or XLA's "Out of memory while trying to allocate" (Keras 3
//     compiles its TensorFlow train step with XLA); InternalError "CUDA
//     runtime implicit initialization on GPU:0 failed. Status: out of
//     memory" (another process fills the GPU).
//   - PyTorch: torch.OutOfMemoryError / torch.cuda.OutOfMemoryError ("CUDA
//     out of memory. Tried to allocate ..."); RuntimeError or
//     torch.AcceleratorError saying "CUDA out of memory", "CUDA error: out
//     of memory", "cuda runtime error (2) : out of memory" or
//     CUBLAS_STATUS_ALLOC_FAILED.
//   - JAX: XlaRuntimeError (jaxlib.xla_extension.XlaRuntimeError),
//     JaxRuntimeError, or an older RuntimeError, saying RESOURCE_EXHAUSTED
//     (or "Resource exhausted") and "Out of memory while trying to
//     allocate" or "Out of memory allocating" (Keras 3 on JAX too).
//   - CuPy: cupy.cuda.memory.OutOfMemoryError ("Out of memory allocating
//     ...", older "out of memory to allocate ..."); CUDARuntimeError or
//     CUDADriverError with cudaErrorMemoryAllocation or
//     CUDA_ERROR_OUT_OF_MEMORY.
//   - CUDA: any exception whose message carries CUDA's own error names,
//     CUDA_ERROR_OUT_OF_MEMORY or cudaErrorMemoryAllocation (numba's
//     CudaAPIError, pygpu, cuda-python); pycuda._driver.MemoryError
//     "cuMemAlloc failed: out of memory".
//
// It never matches: Python's MemoryError (numpy's "Unable to allocate"),
// PyTorch's host allocator ("DefaultCPUAllocator: not enough memory"),
// TensorFlow's OOM on "device:CPU:0 by allocator cpu", other CUDA errors
// ("device-side assert triggered", "an illegal memory access was
// encountered"), InvalidArgumentError, a TPU's "Ran out of memory in
// memory space", KeyboardInterrupt, NameError, or a user's own exception
// whose message mentions memory, or even quotes a framework: a framework's
// phrase counts only on the classes that framework raises. Apple's MPS and
// AMD's HIP are no NVIDIA GPUs, which NVML cannot explain: not matched.
//
// The final exception (ename, evalue) is tried first, then each exception
// line of the traceback (ANSI colour escapes stripped), first printed
// first, so that an out-of-memory error that another exception was raised
// while handling is recognised too. Lines a traceback quotes from source
// code never match: a cell that tests `if "CUDA out of memory" in str(e)`
// is not an out-of-memory error.
//
// Explain(View) writes, after a first line naming the framework, per GPU
// of this kernel a header ("GPU0 <name> (<uuid>): 80 GiB total, 312 MiB
// free") and who holds its memory, largest first, bytes as gpu.FormatBytes
// writes them: this kernel; this user's other kernels, with notebook, id,
// how long idle, and the exact command that frees one (tfgpu-kernel stop
// <id>); other users' processes, by user name only unless the View says
// the admin allows details (then pid and command too); and what processes
// not visible here hold (other containers, PID namespaces), as one
// figure. At most 8 holder lines per GPU, the last summing the rest. When
// nothing but this kernel holds memory on its GPUs, it says the kernel
// used the memory up itself, and gives the framework's sharing-friendly
// allocator setting on one line (TF_FORCE_GPU_ALLOW_GROWTH=true,
// XLA_PYTHON_CLIENT_PREALLOCATE=false,
// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True). Unavailable(why) is
// the one line for when NVML is absent.
//
// # What it assumes
//
// Nothing about the host: no I/O, no NVML calls, no cgo; the caller
// gathers the View. Every function is pure and safe for concurrent use,
// and builds on every OS. It imports internal/bytesize, not internal/gpu,
// because gpu links go-nvml, which needs cgo: formatBytes repeats
// gpu.FormatBytes's one rule ("? MiB" for a figure NVML did not give), and
// a test built where cgo is holds the two equal.
//
// # Bounds
//
// Match looks at no more than Budget (64 KiB) of evalue and traceback
// together, from their start, however large they are: the rest is neither
// copied nor scanned, and each traceback entry costs at least one byte, so
// a million empty entries cost no more. The work is linear in what it
// looks at: one copy of it, with escapes stripped, and no allocation per
// line. Explain's text is plain: names from elsewhere
// (notebook, user, command, NVML's reason) lose control characters and
// bidirectional overrides and are shortened, so a notebook's name or
// another user's command line cannot move the cursor or add lines.
package oom
