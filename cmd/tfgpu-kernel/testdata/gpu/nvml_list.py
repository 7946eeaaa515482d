"""Prints what NVML lists on GPU 0 for the caller (realgpu.sh runs it on the
host and inside a new PID namespace): compute and graphics processes as
(pid, MiB), and the caller's own pid and PID namespace. Needs pynvml
(nvidia-ml-py)."""

import os

import pynvml

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
for name, f in (("compute", pynvml.nvmlDeviceGetComputeRunningProcesses),
                ("graphics", pynvml.nvmlDeviceGetGraphicsRunningProcesses)):
    print(name, [(p.pid, p.usedGpuMemory >> 20) for p in f(h)])
print("self", os.getpid(), os.readlink("/proc/self/ns/pid"))
