"""GPU confirmation (issue 4, "How it is shown"), through the real
jupyter_client and the installed kernelspec, with the fake NVML the Go side
built (internal/gpu/gputest): LD_LIBRARY_PATH selects the fake
libnvidia-ml.so.1, FAKE_NVML_* are its knobs, and holder.py (on
PYTHONPATH) lets a cell hold a device the way CUDA does, by keeping
FAKE_NVML_ROOT/nvidiaN open.

argv[1] picks the scenario:

  release   the kernel holds 2 GiB on GPU0 and starts escaping holders
            (setsid, double fork, SIGTERM-ignoring) on GPU0 and GPU1; a
            foreign holder of the scenario's own holds GPU1; the driver
            takes 2.5 s to release a dead holder (FAKE_NVML_RELEASE_MS).
            `tfgpu-kernel ps --json` shows the kernel's bytes. Restart: the
            new kernel is not ready before the driver released (the order
            of the two, read from the fake's release stamps, not a time),
            and when it is, NVML lists nothing of the old tree; the foreign
            holder is alive, still listed, not named anywhere. Shutdown
            with the 2.5 s release: jupyter_client SIGTERMs the supervisor
            at 2.5 s, which then leaves the rest of the check to the next
            start rather than hold Jupyter up (jupyter_client never SIGKILLs
            it). Shutdown with a 0.8 s
            release: NVML lists nothing of the tree once shutdown_kernel
            returns, and the log has the release line.
  timeout   the release never comes, TFGPU_CONFIRM_TIMEOUT=3s: the restart
            finishes, the new kernel ready after the supervisor logged that
            it gave up waiting, and the first cell (only the first) is
            warned with the device, the pid and the MiB still held.
  pidoffset NVML's pids are host pids of another PID namespace
            (FAKE_NVML_PID_OFFSET): the supervisor confirms by baseline, the
            release is still waited for, the foreign holder that was there
            before the kernel is not.
  orphan    the supervisor is SIGKILLed while its kernel's escaped holders
            hold GPU1: its watcher kills them at once and confirms their
            release (1.5 s), without waiting for another start; then
            jupyter_client restarts the kernel, which comes up and answers.
  idle      three kernels: one idle holding the GPU (with escaped
            holders), one busy in a cell holding it too, one idle holding
            nothing. `ps --json` shows each one's execution_state and
            last_activity; `ps --format prometheus` is written to
            E2E_METRICS with the figures in the facts, for the Go side to
            parse with Prometheus' own parser. `stop --idle-for 1s
            --holding-gpu` stops the idle holder only, and NVML lists none
            of its tree; `stop --idle-for 1s` then stops the idle one
            without GPU memory; the busy kernel's cell runs on throughout.
  limit     TFGPU_GPU_MEMORY_LIMIT=1G: one cell grows the tree's holding
            to 950 MiB (600 in the kernel, 350 in an escaped holder on the
            other device) and is warned once at 90 %; then past the limit,
            and the supervisor kills the whole tree, confirms the release,
            tells the cell and exits 137; KernelRestarter (the server's
            autorestart) starts a fresh kernel, which answers and holds
            nothing.
  limitidle as limit, but a thread of the kernel goes past the limit a
            second after its cell finished: the idle sample kills the tree,
            and with no cell to tell, the fresh kernel's first cell (only
            that one) is told, with the figures.
  pod       in a pod's PID, mount and cgroup namespaces (TestE2EPod), NVML
            reporting host pids: the kernel's cgroup is under the pod's, a
            restart's release is confirmed by baseline with the figures, and
            the GPU limit holds (as in limit).
  oom       a cell ends with a GPU out-of-memory error, PyTorch-shaped
            (torch.OutOfMemoryError) and TensorFlow-shaped
            (ResourceExhaustedError, "OOM when allocating"), raised as those
            frameworks raise them: right after the error, before the idle,
            the cell's stderr says who holds the GPU, word for word: this
            kernel, the user's other kernel by notebook with its stop line,
            another process by user. A ValueError is left alone.
  placement TFGPU_GPUS=auto, two fake GPUs, a foreign holder on GPU0: the
            kernel's CUDA_VISIBLE_DEVICES is GPU1's UUID, its first cell
            (only the first) is told which and why, word for word, and ps
            --json and the usage_reply (the Lab item's source) show it. Two
            kernels started at once (both launched before either is ready)
            land on different GPUs. A restart chooses again (GPU0, once
            GPU1 is fuller), through the spare: the adopted spare's kernel
            has GPU0's UUID. A CUDA_VISIBLE_DEVICES set before the
            start wins, and nothing is said.
  degraded  no driver, an init failure, memory figures NVML cannot give, a
            driver without the _v3 process lists (E2E_NVML_NOV3_DIR): the
            kernel starts, answers, restarts and shuts down as usual, and
            the log says once what could not be checked.
"""

import json
import os
import queue
import re
import subprocess
import sys
import time
import uuid

from jupyter_client import KernelManager

import harness as h
import nvmlcheck
from nvmlcheck import listed_pids

SCENARIO = sys.argv[1] if len(sys.argv) > 1 else "release"
BIN = os.environ["E2E_TFGPU_BIN"]
ROOT = os.environ["FAKE_NVML_ROOT"]
FULL_DIR = os.environ["E2E_NVML_DIR"]
STATE = os.path.join(h.TMP, "state")
os.environ["TFGPU_STATE_DIR"] = STATE

def foreign_holder(dev, mib):
    """A holder that is not the kernel's (another notebook's process)."""
    r, w = os.pipe()
    p = h.spawn_helper([h.PY, os.path.join(os.environ["E2E_HOLDER_DIR"], "holder.py"), str(dev), str(mib),
                        "--ready-fd", str(w)], pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as f:
        f.read()  # the holder reports once it holds the device
    return p.pid


# ------------------------------------------------------------ kernel side

HOLD = r'''
import holder, json
holder.hold(0, %d)
_pids = [holder.escape(0, 512, "setsid"), holder.escape(1, 1024, "double_fork"), holder.escape(1, 256, "ignore_term")]
print("E2E-PIDS " + json.dumps(_pids))
'''


def hold(kc, mib, escapes=True):
    code = HOLD % mib
    if not escapes:
        code = "import holder\nholder.hold(0, %d)\nprint('E2E-PIDS []')\n" % mib
    r = h.ok(h.execute(kc, code, timeout=60), "hold the GPU")
    line = [l for l in r["stdout"].splitlines() if l.startswith("E2E-PIDS ")]
    assert line, "no pids from the holding cell: %r %r" % (r["stdout"], r["stderr"])
    pids = json.loads(line[0][len("E2E-PIDS "):])
    h.track(*pids)
    return pids


def hold_and_shut_down(km, kc):
    """Hold 1 GiB and escaping holders, then shutdown_kernel as Jupyter does;
    returns the tree's pids and the seconds shutdown_kernel took."""
    kpid = h.kernel_pid(kc)
    h.track(kpid)
    escapees = hold(kc, 1024)
    old = set(h.tree_of(km, kc)) | set(escapees) | {kpid}
    kc.stop_channels()
    t0 = time.monotonic()
    km.shutdown_kernel(now=False)
    return old, time.monotonic() - t0


def supervisor_log(km):
    km.e2e_logf.flush()
    with open(km.e2e_log, errors="replace") as f:
        return f.read()


def restart(km, kc):
    """restart_kernel as Jupyter does it; returns the new client and the
    seconds from the call to ready."""
    kc.stop_channels()
    t0 = time.monotonic()
    km.restart_kernel(now=False)
    kc = h.connect(km)
    return kc, time.monotonic() - t0


def ps_json():
    return nvmlcheck.ps_json(BIN)


def ready_after_release(watch, ready_at, what):
    """Checks the order of two events: the new kernel was ready (ready_at,
    wall clock) no earlier than the driver released the old tree's memory."""
    released_at = watch.released_at()
    h.note(stamped=sorted(watch.stamps), ready_after_release_s=None if released_at is None else round(ready_at - released_at, 3))
    h.check(released_at is not None, "%s: the driver never saw a holder of the old tree go" % what)
    h.check(released_at is None or ready_at >= released_at,
            "%s: the new kernel was ready %.2f s before the driver released the old tree's memory" % (
                what, (released_at or 0) - ready_at))


# ------------------------------------------------------------ scenarios


def release():
    os.environ["FAKE_NVML_RELEASE_MS"] = "2500"
    foreign = foreign_holder(1, 300)
    km, kc = h.start_kernel()
    kpid = h.kernel_pid(kc)
    h.track(kpid)
    escapees = hold(kc, 2048)
    old = set(h.tree_of(km, kc)) | set(escapees) | {kpid}
    seen = listed_pids()
    assert {kpid, foreign, *escapees} <= seen, "NVML lists %s, want the kernel %d, escapees %s and foreign %d" % (
        seen, kpid, escapees, foreign)

    rows = [r for r in ps_json() if r["kernel_pid"] == km.provisioner.pid or kpid in r["pids"]]
    assert len(rows) == 1, "ps --json has no row for the kernel: %s" % ps_json()
    gpu = {g["index"]: g["used_bytes"] for g in rows[0]["gpu"]}
    h.note(ps_gpu=rows[0]["gpu"], ps_state=rows[0]["state"])
    assert gpu == {0: (2048 + 512) << 20, 1: (1024 + 256) << 20}, "ps --json gpu %s" % rows[0]["gpu"]
    assert all(k in rows[0] for k in ("kernel_id", "supervisor_pid", "kernel_pid", "pids", "state", "session",
                                      "rss_bytes", "started")), rows[0]
    assert rows[0]["state"] == "running" and rows[0]["rss_bytes"] > 10 << 20, "ps --json: %s" % rows[0]

    watch = nvmlcheck.DriverRelease(2500)
    kc, took = restart(km, kc)
    ready_at = time.time()
    at_ready = listed_pids()
    h.note(restart_to_ready_s=round(took, 3), listed_at_ready=sorted(at_ready))
    ready_after_release(watch, ready_at, "restart with a 2.5 s release")
    h.check(not (at_ready & old), "at ready NVML still lists the old tree: %s" % sorted(at_ready & old))
    h.check(foreign in at_ready and h.alive(foreign), "the foreign holder %d was killed or is gone" % foreign)
    r = h.ok(h.execute(kc, "6*7"), "first cell after restart")
    h.check("GPU memory" not in r["stderr"], "first cell warned although all was released: %r" % r["stderr"])
    log = supervisor_log(km)
    released = [l for l in log.splitlines() if "GPU memory released" in l]
    h.note(released_line=released[-1:] )
    h.check(released and "by=pid" in released[-1] and "GPU0 2.5 GiB" in released[-1] and "GPU1 1.2 GiB" in released[-1],
            "no 'GPU memory released' line with both devices' figures: %s" % released)
    h.check(str(foreign) not in log, "the foreign holder %d is named in the supervisor log" % foreign)
    calls = open(os.environ["FAKE_NVML_LOG"]).read()
    h.check("ComputeRunningProcesses_v3" in calls, "NVML was not consulted")

    # shutdown with the same 2.5 s release: jupyter_client SIGTERMs the
    # supervisor at 2.5 s, and the supervisor then leaves the rest of the
    # check to the next start instead of holding Jupyter up until SIGKILL.
    old, took = hold_and_shut_down(km, kc)
    status = h.shutdown_status(km)
    h.note(slow_shutdown_s=round(took, 3), slow_shutdown_status=status)
    # jupyter_client SIGKILLs what is still alive at the end of its wait:
    # a supervisor that let go on its SIGTERM (or before) was not.
    h.check(status != "SigkillRequest", "jupyter_client had to SIGKILL the supervisor (%s): it held Jupyter up" % status)
    h.check(not [p for p in old if h.alive(p)], "processes of the tree alive after shutdown_kernel")
    log = supervisor_log(km)
    h.check("event=shutdown" in log and ("GPU memory released" in log or "still held" in log),
            "no GPU check of the shutdown in the log")
    listed, waited = h.wait_gone(lambda: listed_pids() & old, interval=0.05)
    h.note(slow_shutdown_nvml_clear_s=round(waited, 3))
    h.check(not listed, "the driver never released the tree's memory")

    # shutdown with a release that fits (0.8 s): confirmed before
    # shutdown_kernel returns.
    os.environ["FAKE_NVML_RELEASE_MS"] = "800"
    km, kc = h.start_kernel()
    old, took = hold_and_shut_down(km, kc)
    left = listed_pids() & old
    shut = [l for l in supervisor_log(km).splitlines() if "GPU memory released" in l and "event=shutdown" in l]
    h.note(shutdown_s=round(took, 3), shutdown_line=shut[-1:])
    h.check(not left, "after shutdown_kernel NVML still lists the old tree: %s" % sorted(left))
    h.check(shut and "GPU0 1.5 GiB, GPU1 1.2 GiB" in shut[-1], "no release line for the shutdown: %s" % shut)
    h.check(h.alive(foreign), "the foreign holder died at shutdown")


def timeout():
    os.environ["FAKE_NVML_RELEASE_MS"] = "-1"
    os.environ["TFGPU_CONFIRM_TIMEOUT"] = "3s"
    foreign = foreign_holder(0, 100)
    km, kc = h.start_kernel()
    kpid = h.kernel_pid(kc)
    h.track(kpid)
    hold(kc, 1024, escapes=False)
    kc, took = restart(km, kc)  # ready within connect's generous wait
    ready_at = time.time()
    held = [l for l in supervisor_log(km).splitlines() if "GPU memory still held" in l]
    held_at = h.log_time(held[-1]) if held else None
    h.note(restart_to_ready_s=round(took, 3), held_line=held[-1:])
    # The order, not the time: the supervisor gave up waiting for the
    # release (its 3 s confirm timeout) before the new kernel was ready.
    h.check(held_at is not None and held_at <= ready_at,
            "the new kernel was ready before the supervisor gave up waiting for the release: %s" % held[-1:])
    first = h.ok(h.execute(kc, "6*7"), "first cell after restart")
    second = h.ok(h.execute(kc, "6*7"), "second cell after restart")
    h.note(warning=first["stderr"])
    h.check("still held" in first["stderr"] and ("pid %d" % kpid) in first["stderr"] and "1 GiB" in first["stderr"]
            and "GPU0" in first["stderr"], "the first cell was not warned with device, pid and MiB: %r" % first["stderr"])
    h.check(("pid %d" % foreign) not in first["stderr"], "the warning blames the foreign holder %d" % foreign)
    h.check("still held" not in second["stderr"], "the second cell was warned again")
    h.check(h.alive(foreign), "the foreign holder was killed")
    km.shutdown_kernel(now=False)


def pidoffset():
    offset = 1 << 22
    os.environ["FAKE_NVML_PID_OFFSET"] = str(offset)
    os.environ["FAKE_NVML_RELEASE_MS"] = "1500"
    foreign = foreign_holder(0, 100)  # there before the kernel: in the baseline
    km, kc = h.start_kernel()
    kpid = h.kernel_pid(kc)
    h.track(kpid)
    escapees = hold(kc, 1024)
    old = {kpid, *escapees}
    watch = nvmlcheck.DriverRelease(1500)
    kc, took = restart(km, kc)
    ready_at = time.time()
    at_ready = listed_pids(offset)
    log = supervisor_log(km)
    released = [l for l in log.splitlines() if "GPU memory released" in l]
    h.note(restart_to_ready_s=round(took, 3), released_line=released[-1:])
    ready_after_release(watch, ready_at, "restart with a 1.5 s release")
    h.check(not (at_ready & old), "at ready NVML still lists the old tree: %s" % sorted(at_ready & old))
    h.check(released and "by=baseline" in released[-1], "not confirmed by baseline: %s" % released)
    h.check(foreign in at_ready and h.alive(foreign), "the foreign holder was killed or waited away")
    r = h.ok(h.execute(kc, "6*7"), "first cell after restart")
    h.check("still held" not in r["stderr"], "warned: %r" % r["stderr"])
    km.shutdown_kernel(now=False)


def orphan():
    import signal
    os.environ["FAKE_NVML_RELEASE_MS"] = "1500"
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    escapees = hold(kc, 256)
    t0 = time.monotonic()
    os.kill(km.provisioner.pid, signal.SIGKILL)
    km.provisioner.process.wait()
    left = h.wait_dead(escapees, h.GONE_WAIT)
    dead_s = time.monotonic() - t0
    h.check(not left, "leftover holders alive %d s after the supervisor was SIGKILLed: %s" % (h.GONE_WAIT, h.describe(left)))
    # Waited for, not timed: no other start comes before the check below
    # that the next start found no leftovers.
    h.wait_gone(lambda: not [l for l in supervisor_log(km).splitlines()
                                         if "GPU memory released" in l and "supervisor died" in l], interval=0.05)
    released = [l for l in supervisor_log(km).splitlines() if "GPU memory released" in l and "supervisor died" in l]
    listed = listed_pids()
    h.note(escapees_dead_s=round(dead_s, 3), released_after_s=round(time.monotonic() - t0, 3), released_line=released[-1:])
    h.check(released and "GPU1 1.2 GiB" in released[-1] and "watcher=" in released[-1],
            "no release line from the watcher: %s" % released)
    h.check(not (listed & set(escapees)), "NVML still lists the leftovers: %s" % sorted(listed & set(escapees)))
    kc.stop_channels()
    km.restart_kernel(now=True)
    kc = h.connect(km)
    h.track(h.kernel_pid(kc))
    h.assert_answers(kc, "the kernel after the restart")
    log = supervisor_log(km)
    h.check("left by a previous supervisor" not in log, "the next start found leftovers the watcher should have killed")
    km.shutdown_kernel(now=False)


def degraded():
    cases = [
        ("no driver", {"LD_LIBRARY_PATH": h.TMP}, "no NVIDIA driver"),
        ("init failure", {"FAKE_NVML_INIT_FAIL": "999"}, "NVML init failed"),
        ("memory not available", {"FAKE_NVML_MEM_UNAVAILABLE": "1", "FAKE_NVML_RELEASE_MS": "300"}, "NVML_VALUE_NOT_AVAILABLE"),
        ("no _v3", {"LD_LIBRARY_PATH": os.environ["E2E_NVML_NOV3_DIR"]}, "driver without the _v3 process lists"),
    ]
    base = dict(os.environ)
    for name, env, want in cases:
        os.environ.clear()
        os.environ.update(base)
        os.environ.update(env)
        km, kc = h.start_kernel()
        h.track(h.kernel_pid(kc))
        if name != "no driver" and name != "init failure":
            hold(kc, 64, escapes=False)
        h.assert_answers(kc, name)
        kc, took = restart(km, kc)
        h.assert_answers(kc, name + ", after restart")
        km.shutdown_kernel(now=False)
        log = supervisor_log(km)
        h.note(**{name.replace(" ", "_") + "_log": [l for l in log.splitlines() if "NVML" in l or "GPU" in l][:4]})
        h.check(want in log, "%s: the log does not say %r" % (name, want))
        # Said by each supervisor that met it, once: the second one of the
        # "memory not available" case only reads NVML through the check.
        said = (1, 2) if name == "memory not available" else (2,)
        h.check(log.count(want) in said, "%s: %r said %d times by two supervisors, want once each" % (
            name, want, log.count(want)))
        if name == "memory not available":
            h.check("released=\"GPU0 ? MiB\"" in log, "%s: the release line does not say the figure is unknown" % name)
    os.environ.clear()
    os.environ.update(base)


def pod():
    """In a pod's namespaces (TestE2EPod runs this inside unshare --pid
    --mount --cgroup): NVML reports host pids (FAKE_NVML_HOST_PROC, set by
    the test), which are not this namespace's, so the supervisor attributes
    by baseline."""
    h.check(os.environ.get("FAKE_NVML_HOST_PROC"), "FAKE_NVML_HOST_PROC is not set")
    os.environ["FAKE_NVML_RELEASE_MS"] = "800"
    h.check(os.getpid() == 1, "not in a PID namespace of its own: pid %d" % os.getpid())
    km, kc = h.start_kernel()
    kpid = h.kernel_pid(kc)
    h.track(kpid)
    with open("/proc/%d/cgroup" % kpid) as f:
        cg = [l for l in f.read().splitlines() if l.startswith("0::")]
    h.note(kernel_cgroup=cg)
    h.check(cg and cg[0].startswith("0::/tfgpu-"), "the kernel is not in a cgroup of its own under the pod's: %s" % cg)
    escapees = hold(kc, 1024)
    listed = listed_pids()
    h.note(nvml_pids=sorted(listed), pod_pids=sorted({kpid, *escapees}))
    h.check(len(listed) == 4 and not listed & {kpid, *escapees},
            "NVML should list the 4 holders by host pid, none by a pid of this namespace: %s" % sorted(listed))
    watch = nvmlcheck.DriverRelease(800)
    kc, took = restart(km, kc)
    ready_at = time.time()
    released = [l for l in supervisor_log(km).splitlines() if "GPU memory released" in l]
    h.note(restart_to_ready_s=round(took, 3), released_line=released[-1:])
    ready_after_release(watch, ready_at, "restart with a 0.8 s release")
    h.check(not nvmlcheck.nvml_list(), "at ready NVML still lists holders: %s" % nvmlcheck.nvml_list())
    h.check(released and "by=baseline" in released[-1] and "GPU0 1.5 GiB, GPU1 1.2 GiB" in released[-1],
            "not confirmed by baseline with the figures: %s" % released)
    kc.stop_channels()
    km.shutdown_kernel(now=False)

    os.environ["TFGPU_GPU_MEMORY_LIMIT"] = "1G"
    km, kc = h.start_kernel()
    limit_kill(km, kc, lambda old: nvmlcheck.nvml_list())


def run_bin(*args):
    out = subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=60)
    h.log("tfgpu-kernel %s: exit %d\n%s%s" % (" ".join(args), out.returncode, out.stdout, out.stderr))
    return out


def idle():
    km_idle, kc_idle = h.start_kernel()
    idle_tree = set(hold(kc_idle, 1024)) | {h.kernel_pid(kc_idle)}
    km_busy, kc_busy = h.start_kernel()
    busy_pid = h.kernel_pid(kc_busy)
    h.track(busy_pid)
    hold(kc_busy, 256, escapes=False)
    km_free, kc_free = h.start_kernel()
    h.track(h.kernel_pid(kc_free))
    # A supervisor takes its kernel id from the connection file's name.
    ids = {k: os.path.basename(m.connection_file)[len("kernel-"):-len(".json")] for k, m in
           (("idle", km_idle), ("busy", km_busy), ("free", km_free))}
    by_id = {v: k for k, v in ids.items()}
    running = kc_busy.execute("import time; time.sleep(120)")
    deadline = time.monotonic() + h.GONE_WAIT
    while True:
        rows = {by_id[r["kernel_id"]]: r for r in ps_json() if r["kernel_id"] in by_id}
        if len(rows) == 3 and rows["busy"]["execution_state"] == "busy":
            break
        h.check(time.monotonic() < deadline, "ps never showed the running cell's kernel busy: %s" % rows)
        time.sleep(0.1)
    time.sleep(1.2)  # every kernel idle for more than the 1 s below, but the busy one
    rows = {by_id[r["kernel_id"]]: r for r in ps_json() if r["kernel_id"] in by_id}
    prom = run_bin("ps", "--format", "prometheus")
    h.check(prom.returncode == 0, "ps --format prometheus failed")
    with open(os.environ["E2E_METRICS"], "w") as f:
        f.write(prom.stdout)
    h.note(ps_rows={k: {f: r[f] for f in ("kernel_id", "execution_state", "last_activity", "gpu", "pids", "user", "rss_bytes")}
                    for k, r in rows.items()})
    for k, want in (("idle", "idle"), ("busy", "busy"), ("free", "idle")):
        h.check(rows[k]["execution_state"] == want, "ps --json: the %s kernel is %r" % (k, rows[k]["execution_state"]))
        h.check(rows[k]["last_activity"], "ps --json: the %s kernel has no last_activity" % k)
    gpu_of = lambda r: {g["index"]: g["used_bytes"] for g in r["gpu"]}
    h.check(gpu_of(rows["idle"]) == {0: (1024 + 512) << 20, 1: (1024 + 256) << 20}, "idle holder's GPU: %s" % rows["idle"]["gpu"])
    h.check(gpu_of(rows["busy"]) == {0: 256 << 20}, "busy holder's GPU: %s" % rows["busy"]["gpu"])
    h.check(gpu_of(rows["free"]) == {}, "free kernel's GPU: %s" % rows["free"]["gpu"])

    h.note(all_rows_before_stop=[(r["kernel_id"], r["state"], r["execution_state"], r["gpu"]) for r in ps_json()])
    out = run_bin("stop", "--idle-for", "1s", "--holding-gpu")
    h.note(stop_holding_gpu=out.stdout.splitlines())
    h.check(out.returncode == 0, "stop --idle-for --holding-gpu: exit %d: %s" % (out.returncode, out.stderr))
    h.check("GPU memory released: GPU0 1.5 GiB, GPU1 1.2 GiB" in out.stdout.splitlines()[-1],
            "stop --idle-for does not say what it freed: %r" % out.stdout)
    h.check("left alone: 1 busy, 1 holding no GPU memory" in out.stdout, "stop --idle-for's summary: %r" % out.stdout)
    # Parked, not ended: the supervisor keeps the ports (Jupyter's
    # restarter never fires), the tree is dead and NVML clear.
    h.check(km_idle.is_alive(), "the idle holder's supervisor ended: Jupyter would restart it")
    h.check(not [p for p in idle_tree if h.alive(p)], "processes of the idle holder's tree alive after stop")
    h.check(not (listed_pids() & idle_tree), "NVML still lists the idle holder's tree")
    h.check(km_busy.is_alive() and km_free.is_alive(), "stop --idle-for --holding-gpu stopped another kernel")
    rows = {by_id[r["kernel_id"]]: r for r in ps_json() if r["kernel_id"] in by_id}
    h.check(rows["idle"]["state"] == "parked" and rows["idle"]["pids"] == [],
            "ps does not show the stopped kernel parked: %s" % rows["idle"])
    parked_at = time.monotonic()
    time.sleep(4)  # jupyter_server's restarter polls every 3 s: it would have fired by now
    h.check(km_idle.is_alive(), "the parked kernel's supervisor ended within 4 s")
    # The parked place answers kernel_info and the heartbeat; the next cell
    # starts a fresh kernel and is told why.
    h.check(kc_idle.is_alive(), "the parked kernel's heartbeat does not answer")
    kc_idle.kernel_info()
    h.shell_reply(kc_idle, kc_idle.kernel_info(), timeout=10)
    first = h.ok(h.execute(kc_idle, "import os; print(os.getpid())", timeout=60), "the first cell after the idle stop")
    h.note(first_cell_after_park=first["stderr"], parked_for_s=round(time.monotonic() - parked_at, 1))
    fresh = int(first["stdout"].strip())
    h.track(fresh)
    h.check(fresh not in idle_tree, "the first cell ran in the old kernel")
    for want in ("tfgpu-kernel: the kernel was stopped by ", "(idle for 1s)", "GPU memory released: GPU0 1.5 GiB, GPU1 1.2 GiB (NVML confirmed)",
                 "This is a fresh kernel."):
        h.check(want in first["stderr"], "the first cell after the idle stop was not told %r: %r" % (want, first["stderr"]))
    second = h.ok(h.execute(kc_idle, "print('again')"), "the second cell after the idle stop")
    h.check("tfgpu-kernel" not in second["stderr"], "the second cell was told again: %r" % second["stderr"])
    kc_idle.stop_channels()
    km_idle.shutdown_kernel(now=False)

    out = run_bin("stop", "--idle-for", "1s")
    h.note(stop_idle=out.stdout.splitlines())
    h.check(out.returncode == 0 and "stopped 1 kernel(s) idle for 1s; left alone: 1 busy" in out.stdout,
            "stop --idle-for 1s: %r" % out.stdout)
    h.check(km_free.is_alive(), "the idle kernel's supervisor ended")
    rows = {by_id[r["kernel_id"]]: r for r in ps_json() if r["kernel_id"] in by_id}
    h.check(rows["free"]["state"] == "parked", "the idle kernel without GPU memory was not parked: %s" % rows["free"])
    h.check(km_busy.is_alive() and rows["busy"]["state"] == "running", "the busy kernel was stopped")
    out = run_bin("stop", "--idle-for", "1s")
    h.check(out.returncode == 0 and "stopped 0 kernel(s)" in out.stdout and "1 not running" in out.stdout,
            "a parked kernel is not left alone by the next idle stop: %r" % out.stdout)
    try:
        reply = kc_busy.get_shell_msg(timeout=0.2)
        h.check(False, "the busy kernel's cell ended early: %s" % reply["content"])
    except queue.Empty:
        pass  # still running
    kc_free.stop_channels()
    km_free.shutdown_kernel(now=False)
    kc_busy.stop_channels()
    km_busy.shutdown_kernel(now=True)


LIMIT_CELL = r'''
import holder, time
holder.hold(0, 600)
print("E2E-PIDS [%d]" % holder.escape(1, 350, "setsid"), flush=True)
time.sleep(2.5)  # sampled every 0.5 s while a cell runs: the 90 % warning comes now
holder.hold(0, 200)
time.sleep(30)
print("survived")
'''


def limit():
    os.environ["TFGPU_GPU_MEMORY_LIMIT"] = "1G"
    km, kc = h.start_kernel()
    limit_kill(km, kc, lambda old: listed_pids() & old)


def limit_kill(km, kc, still_listed):
    """LIMIT_CELL under a 1 GiB limit: warned at 90 %, the tree killed past
    it, the cell told, the release confirmed (still_listed(old pids) is
    what NVML still lists of them); the supervisor keeps the kernel's place
    (Jupyter's restarter does not fire) and the next cell starts a fresh
    kernel."""
    kpid = h.kernel_pid(kc)
    h.track(kpid)
    # The tree: the supervisor's descendants but its watcher, which
    # stays with the supervisor.
    old = {p for p in h.tree_of(km, kc) if p != km.provisioner.pid and BIN not in h.cmdline(p)} | {kpid}
    msg_id = kc.execute(LIMIT_CELL)
    t0 = time.monotonic()
    h.check(not h.wait_dead([kpid], h.GONE_WAIT), "the kernel is alive %d s after going past its 1 GiB GPU limit" % h.GONE_WAIT)
    took = time.monotonic() - t0
    r = h.collect(kc, msg_id, timeout=10, need_idle=True)
    line = [l for l in r["stdout"].splitlines() if l.startswith("E2E-PIDS ")]
    escaped = json.loads(line[0][len("E2E-PIDS "):]) if line else []
    h.track(*escaped)
    old |= set(escaped)
    h.note(limit_kill_s=round(took, 3), cell_stderr=r["stderr"][-800:], escaped=escaped)
    h.check(escaped, "the cell did not start its escaped holder: %r" % r["stdout"])
    h.check(km.is_alive(), "the supervisor ended after the GPU limit kill: Jupyter would restart it")
    h.check(r["stderr"].count("% of its limit of 1 GiB") == 1,
            "the cell was not warned once at 90 %%: stderr %r" % r["stderr"])
    h.check("this kernel holds 950 MiB of GPU memory (GPU0 600 MiB, GPU1 350 MiB), 93% of its limit" in r["stderr"],
            "the warning lacks the figures: %r" % r["stderr"])
    h.check("the kernel used 1.1 GiB of GPU memory (GPU0 800 MiB, GPU1 350 MiB), over its limit of 1 GiB" in r["stderr"]
            and "GPU memory released: GPU0 800 MiB, GPU1 350 MiB (NVML confirmed)" in r["stderr"]
            and "the next cell starts a fresh kernel" in r["stderr"], "the cell was not told of the limit: %r" % r["stderr"])
    h.check(r["reply"] and r["reply"].get("status") == "error", "the cell's reply is not an error: %s" % r["reply"])
    h.check("survived" not in r["stdout"], "the cell ran to the end: the limit did not hold")
    h.check(not h.wait_dead(list(old), h.GONE_WAIT), "processes of the tree alive after the limit kill")
    h.check(not still_listed(old), "NVML still lists the tree after the limit kill")
    h.check("kernel stopped over its GPU memory limit" in supervisor_log(km), "no log line of the limit kill")
    rows = [r for r in ps_json() if km.provisioner.pid == r["supervisor_pid"]]
    h.check(rows and rows[0]["state"] == "parked", "ps does not show the kernel parked: %s" % rows)

    nxt = h.ok(h.execute(kc, "import os; print(os.getpid())", timeout=60), "the next cell after the GPU limit kill")
    fresh = int(nxt["stdout"].strip())
    h.track(fresh)
    h.check(fresh not in old, "the next cell ran in the old kernel")
    h.check("tfgpu-kernel" not in nxt["stderr"], "the next cell was told again: %r" % nxt["stderr"])
    h.assert_answers(kc, "kernel after the GPU limit kill")
    rows = [r for r in ps_json() if km.provisioner.pid == r["supervisor_pid"]]
    h.check(rows and rows[0]["gpu"] == [] and rows[0]["kernel_pid"] == fresh, "the fresh kernel's ps row: %s" % rows)
    kc.stop_channels()
    km.shutdown_kernel(now=False)


def limitidle():
    """The GPU limit crossed with no cell running: a thread of the kernel
    allocates a second after its cell finished. The supervisor's idle
    sample (every 5 s) kills the tree and parks the kernel; there is no
    cell to tell, so the next cell, in a fresh kernel, is told, with the
    figures, and only that one."""
    os.environ["TFGPU_GPU_MEMORY_LIMIT"] = "1G"
    km, kc = h.start_kernel()
    kpid = h.kernel_pid(kc)
    h.track(kpid)
    h.ok(h.execute(kc, "import holder, threading\nthreading.Timer(1.0, holder.hold, (0, 1200)).start()"),
         "the cell that starts the allocating thread")
    t0 = time.monotonic()
    h.check(not h.wait_dead([kpid], h.GONE_WAIT), "the kernel is alive %d s after a thread took it past its 1 GiB GPU limit" % h.GONE_WAIT)
    h.note(idle_limit_kill_s=round(time.monotonic() - t0, 3))
    h.check(km.is_alive(), "the supervisor ended after the GPU limit kill: Jupyter would restart it")

    first = h.ok(h.execute(kc, "import os; print(os.getpid())", timeout=60), "the fresh kernel's first cell")
    h.track(int(first["stdout"].strip()))
    second = h.ok(h.execute(kc, "6*7", timeout=30), "the fresh kernel's second cell")
    h.note(first_cell_stderr=first["stderr"][-800:])
    h.check("the kernel used 1.1 GiB of GPU memory (GPU0 1.1 GiB), over its limit of 1 GiB" in first["stderr"]
            and "GPU memory released: GPU0 1.1 GiB (NVML confirmed)" in first["stderr"]
            and "This is a fresh kernel." in first["stderr"],
            "the fresh kernel's first cell was not told of the limit: %r" % first["stderr"])
    h.check("tfgpu-kernel" not in second["stderr"], "the notice was shown twice: %r" % second["stderr"])
    rows = [r for r in ps_json() if km.provisioner.pid == r["supervisor_pid"]]
    h.check(rows and rows[0]["gpu"] == [], "the fresh kernel holds GPU memory: %s" % rows)
    kc.stop_channels()
    km.shutdown_kernel(now=False)


TORCH_OOM = r'''
import types
torch = types.ModuleType("torch")
class OutOfMemoryError(RuntimeError):
    pass
OutOfMemoryError.__module__ = "torch"
torch.OutOfMemoryError = OutOfMemoryError
raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
    "141.00 GiB of which 135.00 GiB is free. Of the allocated memory 1.00 GiB is allocated by PyTorch")
'''

TF_OOM = r'''
class ResourceExhaustedError(Exception):
    pass
ResourceExhaustedError.__module__ = "tensorflow.python.framework.errors_impl"
raise ResourceExhaustedError("{{function_node __wrapped__AddV2_device_/job:localhost/replica:0/task:0/device:GPU:0}} "
    "OOM when allocating tensor with shape[40000,40000] and type float on /job:localhost/replica:0/task:0/device:GPU:0 "
    "by allocator GPU_0_bfc [Op:AddV2] name: ")
'''


def oom():
    foreign = foreign_holder(0, 3072)  # a process of this user that is no kernel
    os.environ["JPY_SESSION_NAME"] = "work/train.ipynb"  # as jupyter_server names the notebook
    km2, kc2 = h.start_kernel()
    del os.environ["JPY_SESSION_NAME"]
    h.track(h.kernel_pid(kc2))
    hold(kc2, 2048, escapes=False)
    other = [r for r in ps_json() if r["supervisor_pid"] == km2.provisioner.pid]
    assert other, "ps --json has no row for the other kernel: %s" % ps_json()
    other_id = other[0]["kernel_id"]
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    hold(kc, 1024, escapes=False)

    def told(r):
        """The stream text that came between the error and the idle."""
        types_ = [m["msg_type"] for m in r["msgs"]]
        assert "error" in types_, "no error message: %s" % types_
        after = r["msgs"][types_.index("error") + 1:]
        return "".join(m["content"]["text"] for m in after if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")

    gpu0 = ("GPU0 Fake NVIDIA H200 (GPU-fa4e0000-0000-0000-0000-000000000000): 141 GiB total, 135 GiB free\n"
            "  3 GiB      user root\n"
            "  2 GiB      your notebook work/train.ipynb (kernel %s), idle IDLE; free it with: tfgpu-kernel stop %s\n"
            "  1 GiB      this kernel\n" % (other_id[:8], other_id))
    gpu1 = "GPU1 Fake NVIDIA H200 (GPU-fa4e0000-0000-0000-0000-000000000001): 141 GiB total, 141 GiB free\n  0 B        this kernel\n"
    for name, code in (("PyTorch", TORCH_OOM), ("TensorFlow", TF_OOM)):
        r = h.execute(kc, code, timeout=30)
        assert r["status"] == "error" and r["idle"], "%s: the cell did not end in an error: %s" % (name, r["status"])
        got = re.sub(r"idle [0-9dhms]+;", "idle IDLE;", told(r))
        want = "%s ran out of GPU memory. Who holds it now, largest first:\n" % name + gpu0 + gpu1
        h.note(**{"told_" + name: got})
        h.check(got == want, "%s out-of-memory cell was told\n%r\nwant\n%r" % (name, got, want))
    r = h.execute(kc, "raise ValueError('CUDA out of memory, says the user')", timeout=30)
    h.check(r["status"] == "error" and told(r) == "", "a ValueError was explained: %r" % told(r))

    # --oom-details (here its variable): the other process by pid and
    # command too, as /proc shows it (shortened past 60 characters).
    os.environ["TFGPU_OOM_DETAILS"] = "1"
    km3, kc3 = h.start_kernel()
    del os.environ["TFGPU_OOM_DETAILS"]
    h.track(h.kernel_pid(kc3))
    with open("/proc/%d/cmdline" % foreign) as f:
        cmd = f.read().replace("\0", " ").strip()
    if len(cmd) > 60:
        cmd = cmd[:57] + "..."
    r = h.execute(kc3, TORCH_OOM, timeout=30)
    line = "  3 GiB      user root, pid %d: %s\n" % (foreign, cmd)
    h.check(line in told(r), "with --oom-details the other process's line is not %r:\n%s" % (line, told(r)))
    for k, c in ((km, kc), (km2, kc2), (km3, kc3)):
        c.stop_channels()
        k.shutdown_kernel(now=False)


FIRST = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)'), os.getpid())"


def uuid_of(n):
    return "GPU-fa4e0000-0000-0000-0000-0000000000%02x" % n


def first_cell(kc):
    """The kernel's first cell: its CUDA_VISIBLE_DEVICES, pid and what it was told."""
    r = h.ok(h.execute(kc, FIRST, timeout=60), "the first cell")
    visible, pid = r["stdout"].split()
    h.track(int(pid))
    return visible, r["stderr"]


def usage_reply(kc):
    msg = kc.session.msg("usage_request", {})
    kc.control_channel.send(msg)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            m = kc.get_control_msg(timeout=1)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return m["content"]
    raise AssertionError("no usage_reply")


def placement():
    os.environ["TFGPU_GPUS"] = "auto"
    foreign_holder(0, 4096)
    km, kc = h.start_kernel()
    visible, told = first_cell(kc)
    want = ("tfgpu-kernel: --gpus auto chose GPU1 (Fake NVIDIA H200) with 141 GiB free of 141 GiB for this kernel: the most free memory.\n"
            "  not chosen: GPU0 (Fake NVIDIA H200) with 137 GiB free of 141 GiB\n"
            "CUDA_VISIBLE_DEVICES=%s\n" % uuid_of(1))
    h.note(first_told=told)
    h.check(visible == uuid_of(1), "CUDA_VISIBLE_DEVICES %r; want GPU1's UUID" % visible)
    h.check(told == want, "the first cell was told\n%r\nwant\n%r" % (told, want))
    again, told2 = first_cell(kc)
    h.check(again == visible and told2 == "", "the second cell: %r, told %r" % (again, told2))
    rows = [r for r in ps_json() if r["supervisor_pid"] == h.supervisor_pid(km)]
    h.check(rows and (rows[0].get("placement") or {}).get("visible") == uuid_of(1),
            "ps --json does not show the placement: %s" % (rows and rows[0].get("placement")))
    prom = run_bin("ps", "--format", "prometheus").stdout
    h.check(rows and any(l.startswith('tfgpu_kernel_gpu_placement{kernel_id="%s",' % rows[0]["kernel_id"]) and
                         l.endswith(',gpu="1",uuid="%s"} 1' % uuid_of(1)) for l in prom.splitlines()),
            "ps --format prometheus does not show the placement:\n%s" % prom)
    u = usage_reply(kc)
    h.check((u.get("gpu_placement") or {}).get("visible") == uuid_of(1) and [g["index"] for g in u.get("gpus", [])] == [1],
            "usage_reply: gpu_placement %s, gpus %s" % (u.get("gpu_placement"), u.get("gpus")))

    # Two kernels started at once: both launched before either is ready,
    # before either holds anything (NVML shows the same to both).
    kms = []
    for n in range(2):
        conn = os.path.join(h.TMP, "kernel-%s.json" % uuid.uuid4())
        k = KernelManager(kernel_name=h.KERNEL, connection_file=conn)
        k.e2e_log = os.path.join(h.TMP, "kernel-at-once-%d.log" % n)
        k.e2e_logf = open(k.e2e_log, "ab")
        kms.append(k)
        h._KMS.append(k)  # the harness shuts it down should the scenario fail
    for k in kms:
        k.start_kernel(stdout=k.e2e_logf, stderr=k.e2e_logf)
        h.track(k.provisioner.pid)
    got = []
    for k in kms:
        c = h.connect(k)
        got.append((k, c) + first_cell(c))
    h.note(at_once=[(v, t) for _, _, v, t in got])
    h.check(got[0][2] != got[1][2] and {got[0][2], got[1][2]} <= {uuid_of(0), uuid_of(1)},
            "two kernels started at once got %s and %s" % (got[0][2], got[1][2]))
    for k, c, _, t in got:
        h.check("claimed by your kernels starting now" in t or "--gpus auto chose" in t, "told %r" % t)
        c.stop_channels()
        k.shutdown_kernel(now=False)

    # A restart chooses again, and GPU1 is fuller now: the kernel moves to
    # GPU0. The spare (kept since the start, its environment without
    # CUDA_VISIBLE_DEVICES) gets it at adoption.
    foreign_holder(1, 8192)
    kc, _ = restart(km, kc)
    visible, told = first_cell(kc)
    adopted = "took over the kernel's start with a spare kernel" in supervisor_log(km)
    h.note(restart_told=told, adopted_spare=adopted)
    h.check(adopted, "the restart did not adopt the spare: its path is not tested")
    h.check(visible == uuid_of(0) and told.startswith("tfgpu-kernel: --gpus auto chose GPU0 (Fake NVIDIA H200) with 137 GiB free"),
            "after the restart: CUDA_VISIBLE_DEVICES %r, told %r; want GPU0" % (visible, told))
    kc.stop_channels()
    km.shutdown_kernel(now=False)

    # Set before the start: it wins, nothing chosen, nothing said.
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    km, kc = h.start_kernel()
    del os.environ["CUDA_VISIBLE_DEVICES"]
    visible, told = first_cell(kc)
    h.check(visible == "0" and told == "", "with CUDA_VISIBLE_DEVICES=0 set: %r, told %r" % (visible, told))
    kc.stop_channels()
    km.shutdown_kernel(now=False)
    del os.environ["TFGPU_GPUS"]


h.run({"release": release, "timeout": timeout, "pidoffset": pidoffset, "orphan": orphan, "degraded": degraded,
       "idle": idle, "limit": limit, "limitidle": limitidle, "pod": pod, "oom": oom,
       "placement": placement}[SCENARIO])
