"""The GPU as a user sees it from outside the supervisor, for the E2E
scenarios that use the fake NVML (gpu.py, server.py): NVML's process list
through ctypes, and `tfgpu-kernel ps --json`."""

import ctypes
import json
import subprocess


class ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (v2 and v3)
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]


_LIB = None


def nvml_list():
    """(device, pid, bytes) of every compute process NVML lists now. The
    calling process loads the fake once, with the knobs in its environment,
    which the supervisors it starts inherit, so it sees what they see."""
    global _LIB
    if _LIB is None:
        _LIB = ctypes.CDLL("libnvidia-ml.so.1")
    rc = _LIB.nvmlInit_v2()
    assert rc == 0, "nvmlInit_v2: %d" % rc
    try:
        n = ctypes.c_uint()
        assert _LIB.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
        procs = getattr(_LIB, "nvmlDeviceGetComputeRunningProcesses_v3", None) or _LIB.nvmlDeviceGetComputeRunningProcesses_v2
        out = []
        for i in range(n.value):
            dev = ctypes.c_void_p()
            assert _LIB.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(dev)) == 0
            cnt, buf = ctypes.c_uint(64), (ProcessInfo * 64)()
            rc = procs(dev, ctypes.byref(cnt), buf)
            assert rc == 0, "process list: %d" % rc
            out += [(i, buf[k].pid, buf[k].used) for k in range(cnt.value)]
        return out
    finally:
        _LIB.nvmlShutdown()


def listed_pids(offset=0):
    """The pids NVML lists, less offset (FAKE_NVML_PID_OFFSET)."""
    return {pid - offset for _, pid, _ in nvml_list()}


def ps_json(bin):
    """`tfgpu-kernel ps --json` with this process's environment."""
    out = subprocess.run([bin, "ps", "--json"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, "tfgpu-kernel ps --json: exit %d: %s" % (out.returncode, out.stderr)
    return json.loads(out.stdout)
