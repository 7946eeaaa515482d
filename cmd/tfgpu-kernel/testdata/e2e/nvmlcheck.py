"""The GPU as a user sees it from outside the supervisor, for the E2E
scenarios that use the fake NVML (gpu.py, server.py): NVML's process list
through ctypes, `tfgpu-kernel ps --json`, and when the fake driver released
a holder (DriverRelease)."""

import ctypes
import json
import os
import subprocess
import threading


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


class DriverRelease:
    """When the fake driver released what died while this watches: the
    first observer of a registered holder gone stamps
    FAKE_NVML_ROOT/ctx/<pid>.<dev>.gone with the wall-clock ms, the holder is
    released release_ms later and the stamp removed then (fakenvml.c), so a
    thread reads each stamp while it is there. Lets a scenario check that an
    event (the new kernel ready) came after the release, not how long
    anything took."""

    def __init__(self, release_ms):
        self.release_s = release_ms / 1000.0
        self.stamps = {}
        self._dir = os.path.join(os.environ["FAKE_NVML_ROOT"], "ctx")
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _scan(self):
        try:
            names = os.listdir(self._dir)
        except OSError:
            return
        for n in names:
            if not n.endswith(".gone") or n in self.stamps:
                continue
            try:
                with open(os.path.join(self._dir, n)) as f:
                    v = f.read().strip()
            except OSError:
                continue  # released meanwhile: seen by the last scan or not ours
            if v:  # empty: its observer has not written it yet
                self.stamps[n] = int(v) / 1000.0

    def _watch(self):
        while not self._halt.is_set():
            self._scan()
            self._halt.wait(0.01)

    def released_at(self):
        """Stops watching; the wall-clock second the last holder stamped
        was released, None when none was."""
        self._halt.set()
        self._thread.join()
        self._scan()
        return max(self.stamps.values()) + self.release_s if self.stamps else None
