"""The measurement behind docs/img/gpu-restart.svg: GPU memory over time
across Jupyter's Restart, on one kernelspec (E2E_KERNEL: the stock
"python3" or "tfgpu"), with the fake NVML the Go side built
(TestE2EFigureGPURestart, internal/gpu/gputest).

What a user does, as Jupyter does it: a cell holds KERNEL_MIB on GPU0 in
the kernel and starts a setsid'd holder of WORKER_MIB (a DataLoader worker
that left the kernel's process group); a second later
km.restart_kernel(now=False), Jupyter's Restart; once the new kernel is
ready the user takes a moment and re-runs the cell's allocation
(KERNEL_MIB again in the new kernel). Throughout, a thread of this process
reads NVML's process lists every INTERVAL seconds, the way nvidia-smi
would, and the steps are marked on the same clock.

Facts: "columns" and "samples" (one row per sample: seconds since the
first one, then MiB held by each role: the old kernel, the escaped worker,
the new kernel, anything else), "marks" (seconds of each step: cell,
cell_done, restart, restart_returned, ready, rerun, rerun_done, end),
"pids" and "worker_alive_at_end". Nothing about the memory is asserted
here: the Go side asserts what the figure shows, the same for both
kernels. Whatever happens, the worker is killed at the end: the stock
kernel leaves it holding its memory, which is the point of the figure.
"""

import json
import os
import signal
import threading
import time

import harness as h
import nvmlcheck

KERNEL_MIB = 4096
WORKER_MIB = 2048
INTERVAL = 0.05
ROLES = ("kernel", "worker", "new_kernel", "other")

HOLD = r'''
import holder, json, os
holder.hold(0, %d)
print("E2E-PIDS " + json.dumps({"kernel": os.getpid(), "worker": holder.escape(0, %d, "setsid")}))
'''

RERUN = r'''
import holder, json, os
holder.hold(0, %d)
print("E2E-PIDS " + json.dumps({"new_kernel": os.getpid()}))
'''


class Sampler(threading.Thread):
    """Reads what NVML lists every INTERVAL s on its own clock (t0), by pid.

    nvml_list runs nvmlInit and nvmlShutdown per call, as a monitoring tool
    would; this process loaded the fake with the knobs the supervisors
    got, so it sees the release when they do. A listing also starts a dead
    holder's release clock in the fake (testdata/fakenvml.c: the first
    observer stamps it), which is no later than the supervisor's own poll
    would."""

    def __init__(self):
        super().__init__(daemon=True)
        self.t0 = time.monotonic()
        self.samples = []  # (t, {pid: MiB})
        self.error = None
        self._halt = threading.Event()

    def now(self):
        return round(time.monotonic() - self.t0, 3)

    def run(self):
        due = time.monotonic()
        try:
            while not self._halt.is_set():
                t = self.now()
                held = {}
                for _, pid, used in nvmlcheck.nvml_list():
                    held[pid] = held.get(pid, 0) + used // (1 << 20)
                self.samples.append((t, held))
                # On a fixed schedule, so a slow listing does not stretch the next interval.
                due += INTERVAL
                self._halt.wait(max(0.0, due - time.monotonic()))
        except BaseException as e:  # reported by stop(), in the main thread
            self.error = e

    def stop(self):
        self._halt.set()
        self.join(10)
        assert not self.is_alive(), "the NVML sampler did not stop"
        if self.error:
            raise AssertionError("the NVML sampler failed: %r" % self.error)


def pids_of(r):
    line = [l for l in r["stdout"].splitlines() if l.startswith("E2E-PIDS ")]
    assert line, "no pids from the cell: %r %r" % (r["stdout"], r["stderr"])
    return json.loads(line[0][len("E2E-PIDS "):])


def kill_worker(pid):
    """SIGKILL the escaped worker by pid, if it is still ours: a stock
    kernel leaves it running, and nothing else would end it."""
    if h.alive(pid) and "holder.py" in h.cmdline(pid):
        os.kill(pid, signal.SIGKILL)


def main():
    import ipykernel
    import jupyter_client
    h.note(jupyter_client=jupyter_client.__version__, ipykernel=ipykernel.__version__)
    km, kc = h.start_kernel()
    marks, pids = {}, {}
    sampler = Sampler()
    sampler.start()
    mark = lambda name: marks.__setitem__(name, sampler.now())
    try:
        time.sleep(0.5)  # the figure starts from an idle kernel holding nothing
        mark("cell")
        pids.update(pids_of(h.ok(h.execute(kc, HOLD % (KERNEL_MIB, WORKER_MIB), timeout=60), "the holding cell")))
        mark("cell_done")
        h.track(*pids.values())
        time.sleep(1.0)

        kc.stop_channels()
        mark("restart")
        km.restart_kernel(now=False)
        mark("restart_returned")
        h.track(km.provisioner.pid)
        kc = h.connect(km)
        mark("ready")
        time.sleep(0.5)  # the user's moment before re-running: what NVML shows then is the figure's point

        mark("rerun")
        pids.update(pids_of(h.ok(h.execute(kc, RERUN % KERNEL_MIB, timeout=60), "the re-run cell")))
        mark("rerun_done")
        h.track(pids["new_kernel"])
        time.sleep(1.5)
        mark("end")
    finally:
        try:
            sampler.stop()
        finally:
            if "worker" in pids:
                h.note(worker_alive_at_end=h.alive(pids["worker"]))
                kill_worker(pids["worker"])

    role = {pids[r]: r for r in ROLES if r in pids}
    rows, others = [], set()
    for t, held in sampler.samples:
        mib = dict.fromkeys(ROLES, 0)
        for pid, m in held.items():
            mib[role.get(pid, "other")] += m
            if pid not in role:
                others.add(pid)
        rows.append([t] + [mib[r] for r in ROLES])
    h.note(columns=["t"] + ["%s_mib" % r for r in ROLES], samples=rows, marks=marks, pids=pids,
           other_pids=sorted(others), interval_s=INTERVAL, release_ms=int(os.environ.get("FAKE_NVML_RELEASE_MS", "0")))

    kc.stop_channels()
    km.shutdown_kernel(now=False)


h.run(main)
