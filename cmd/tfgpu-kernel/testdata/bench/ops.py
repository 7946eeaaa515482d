"""The operating figures of docs/benchmarks.md (issue 14), run by
BenchmarkOps with the fake NVML of internal/gpu/gputest (two devices):

1. GPU memory limit sampling: one supervised kernel with
   TFGPU_GPU_MEMORY_LIMIT and one without, side by side, each running a cell
   that sleeps OPS_CELL_S seconds, then idle OPS_IDLE_S seconds. For each:
   the supervisor's CPU (utime + stime) and wake-ups (context switches of
   all its threads) over each period, and the NVML process-list calls the
   fake logged (FAKE_NVML_LOG), so the cost of sampling is the difference.
2. `tfgpu-kernel ps` with OPS_KERNELS supervised kernels (plus the two
   above): wall time of `ps`, `ps --json` and `ps --format prometheus`,
   OPS_PS_REPS runs each, median, with NVML (the fake) and without.

Prints one line per figure and writes JSON to TFGPU_BENCH_JSON.
Environment: BENCH_WRAPPED_KERNEL (kernelspec name), BENCH_TFGPU_BIN,
BENCH_LOG_DIR, FAKE_NVML_* (the fake's), TFGPU_STATE_DIR (this run's).
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import time

from jupyter_client import KernelManager

from bench import cpu_seconds, wakeups  # the same probes as the kernel benchmark

KERNEL = os.environ.get("BENCH_WRAPPED_KERNEL", "tfgpu")
BIN = os.environ["BENCH_TFGPU_BIN"]
LOG_DIR = os.environ.get("BENCH_LOG_DIR", ".")
N_KERNELS = int(os.environ.get("OPS_KERNELS", "50"))
CELL_S = float(os.environ.get("OPS_CELL_S", "10"))
IDLE_S = float(os.environ.get("OPS_IDLE_S", "10"))
PS_REPS = int(os.environ.get("OPS_PS_REPS", "5"))


def log(*a):
    print("[ops %7.1fs]" % (time.monotonic() - T0), *a, flush=True)


def nvml_calls():
    try:
        with open(os.environ["FAKE_NVML_LOG"]) as f:
            return sum(1 for l in f if "ComputeRunningProcesses" in l)
    except OSError:
        return 0


KMS = []


def start(extra_env=None):
    km = KernelManager(kernel_name=KERNEL)
    logf = open(os.path.join(LOG_DIR, "ops-%d.log" % len(KMS)), "ab")
    env = dict(os.environ, **(extra_env or {}))
    km.start_kernel(stdout=logf, stderr=logf, env=env)
    KMS.append(km)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    return km, kc


def measure(pids, seconds):
    c0 = {p: cpu_seconds(p) for p in pids}
    w0 = {p: wakeups(p) for p in pids}
    time.sleep(seconds)
    return {p: ((cpu_seconds(p) - c0[p]) * 1000, wakeups(p) - w0[p]) for p in pids}


def sampling(results):
    limited = start({"TFGPU_GPU_MEMORY_LIMIT": "100G"})
    plain = start()
    sup = {"limit": limited[0].provisioner.pid, "none": plain[0].provisioner.pid}
    time.sleep(1)
    for _, kc in (limited, plain):
        kc.execute("import time; time.sleep(%f)" % (CELL_S + 0.5))
    time.sleep(0.2)
    n0 = nvml_calls()
    busy = measure(sup.values(), CELL_S)
    n_busy = nvml_calls() - n0
    for _, kc in (limited, plain):
        kc.get_shell_msg(timeout=CELL_S + 30)
    time.sleep(0.5)
    n0 = nvml_calls()
    idle = measure(sup.values(), IDLE_S)
    n_idle = nvml_calls() - n0
    for period, m, calls, secs in (("busy", busy, n_busy, CELL_S), ("idle", idle, n_idle, IDLE_S)):
        for name, pid in sup.items():
            cpu, wake = m[pid]
            results["sampling_%s_%s" % (period, name)] = {"cpu_ms": cpu, "wakeups": wake, "seconds": secs}
            log("supervisor %-5s limit=%-4s: %.0f ms CPU, %d wake-ups in %.0f s" % (period, name, cpu, wake, secs))
        results["sampling_%s_nvml_list_calls" % period] = calls
        log("NVML process-list calls while %s (both supervisors): %d in %.0f s" % (period, calls, secs))


def ps_times(results, label, env):
    for args in (["ps"], ["ps", "--json"], ["ps", "--format", "prometheus"]):
        times = []
        for _ in range(PS_REPS):
            t0 = time.monotonic()
            out = subprocess.run([BIN] + args, capture_output=True, env=env, timeout=120)
            times.append((time.monotonic() - t0) * 1000)
            if out.returncode != 0:
                raise RuntimeError("%s: exit %d: %s" % (args, out.returncode, out.stderr))
        key = "ps_ms_%s_%s" % (label, "_".join(a.strip("-") for a in args[1:]) or "table")
        results[key] = {"median": statistics.median(times), "min": min(times), "max": max(times)}
        log("%-40s %d kernels, %s: median %.0f ms (min %.0f, max %.0f)" % (
            " ".join(["tfgpu-kernel"] + args), len(KMS), label, statistics.median(times), min(times), max(times)))


def main():
    results = {"kernels": N_KERNELS}
    try:
        sampling(results)
        log("starting %d more kernels" % N_KERNELS)
        for i in range(N_KERNELS):
            start()
        rows = json.loads(subprocess.run([BIN, "ps", "--json"], capture_output=True, text=True, timeout=120).stdout)
        results["ps_rows"] = len(rows)
        log("ps --json lists %d kernels" % len(rows))
        ps_times(results, "nvml", dict(os.environ))
        ps_times(results, "no_nvml", dict(os.environ, LD_LIBRARY_PATH="/nonexistent"))
    finally:
        for km in KMS:
            try:
                km.shutdown_kernel(now=True)
            except Exception as e:  # noqa: BLE001 — reap every one
                log("shutdown:", e)
    with open(os.environ["TFGPU_BENCH_JSON"], "w") as f:
        json.dump(results, f, indent=1)
    return 0


def on_term(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)  # the finally reaps the kernels


signal.signal(signal.SIGTERM, on_term)
T0 = time.monotonic()
sys.exit(main())
