"""The Python side of TestE2ESlurm (cmd/tfgpu-kernel/e2e_slurm_test.go): run
by job.sh inside a Slurm batch job, as a notebook server inside a job (Open
OnDemand's Jupyter app) runs: /usr/bin/python3 with Debian's jupyter_client
starts the "tfgpu" kernelspec through KernelManager.

argv[1], the part to play:

  restart-scancel  a kernel whose cell starts a setsid'd, double-forked,
                   SIGTERM-ignoring daemon (and a SIGTERM-ignoring child);
                   km.restart_kernel(); the old tree must go (waited for,
                   harness.GONE_WAIT, the time noted) and the new kernel
                   answer: written to OUT/restart.json.
                   Then the new kernel's cell starts the same two again, and
                   OUT/ready.json names the supervisor, the kernel, the
                   children, the whole tree, the kernel's id and the probe
                   (a child of the driver that notes when SIGTERM reaches
                   it and lives on, so that the test can time Slurm's
                   SIGKILL); then the driver only sleeps until the test
                   scancels the job.
  next             "whoever comes next": a kernel starts, answers and is shut
                   down: OUT/next.json.
  memory           (a job with --mem) a kernel touches 1.5 GB: it must be
                   killed and the cell told of the Slurm job's memory limit;
                   then a kernel started with TFGPU_MEMORY_LIMIT=300M must
                   say in its first cell that the limit is not applied
                   inside a Slurm job: OUT/memory.json.

Environment in: E2E_SLURM_OUT (OUT, a directory the test reads),
E2E_SCRIPTS (testdata/e2e, for harness.py), E2E_TMP, and what harness.py
reads. Each result file is {"ok", "errors": [...], "facts": {...},
"pids": [...]}, written by rename, so the test never reads half of one.
"""

import json
import os
import re
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.environ["E2E_SCRIPTS"])
import harness as h  # noqa: E402

OUT = os.environ["E2E_SLURM_OUT"]
PART = sys.argv[1]
ERRORS = []


def write(name, obj):
    p = os.path.join(OUT, name)
    with open(p + ".tmp", "w") as f:
        json.dump(obj, f, default=str)
    os.rename(p + ".tmp", p)


def expect(cond, msg):
    if not cond:
        ERRORS.append(msg)
        h.log("FAILED: " + msg)
    return cond


def result(name):
    write(name, {"ok": not ERRORS, "errors": list(ERRORS), "facts": h.FACTS, "pids": h.PIDS})


def kernel_id(km):
    m = re.fullmatch(r"kernel-(.+)\.json", os.path.basename(km.connection_file))
    return m.group(1) if m else ""


def cgroups(pid):
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            return f.read().split()
    except OSError:
        return []


# The probe: a child of the driver (not of a kernel) that notes when SIGTERM
# reaches it and lives on, so that its death is Slurm's SIGKILL: the test
# times both against scancel.
PROBE = r"""
import os, signal, sys, time
path = sys.argv[1]
def term(*_):
    with open(path, "a") as f:
        f.write("%.6f\n" % time.time())
signal.signal(signal.SIGTERM, term)
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def start_probe():
    p = subprocess.Popen([sys.executable, "-c", PROBE, os.path.join(OUT, "probe-term")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready", "the probe did not start"
    p.stdout.close()
    return p.pid


def job_env():
    return {k: v for k, v in os.environ.items() if k in ("SLURM_JOB_ID", "SLURM_JOB_UID", "SLURM_CPUS_ON_NODE", "SLURM_MEM_PER_NODE", "SLURM_STEP_ID")}


def restart_scancel():
    h.note(job=job_env(), driver_pid=os.getpid(), driver_cgroups=cgroups(os.getpid()))
    try:
        km, kc = h.start_kernel()
        h.note(kernel_id=kernel_id(km))
        kids = h.spawn_children(kc)
        old = sorted(set(h.tree_of(km) + list(kids.values())))
        h.note(restart_old_tree=h.describe(old), restart_old_cgroups={"supervisor": cgroups(km.provisioner.pid), "daemon": cgroups(kids["daemon"])})
        t0 = time.monotonic()
        km.restart_kernel()
        took = time.monotonic() - t0
        left_now = h.survivors(old)
        left = h.wait_dead(old, h.GONE_WAIT)
        h.note(restart_s=round(took, 3), restart_survivors_on_return=h.describe(left_now), restart_survivors_left=h.describe(left),
               restart_tree_gone_after_return_s=round(time.monotonic() - t0 - took, 3), restart_shutdown_status=h.shutdown_status(km))
        expect(not left, "restart inside the job: processes of the old tree alive %d s after restart_kernel() returned: %s" % (
            h.GONE_WAIT, h.describe(left)))
        kc.stop_channels()
        kc = h.connect(km)
        h.assert_answers(kc, "the new kernel after restart_kernel() inside the job")
    except Exception as e:
        expect(False, "restart inside the job: %s: %s" % (type(e).__name__, e))
        h.log(traceback.format_exc())
        h._log_tails()
        result("restart.json")
        return
    result("restart.json")

    # The scancel part: the new kernel starts the same children; the test
    # scancels the job while the driver sleeps. With E2E_SLURM_PARK=1 the
    # kernel is first parked (tfgpu-kernel stop) and the next cell starts a
    # fresh one, whose children scancel must end as well: every generation
    # of the kernel stays in the job's cgroups (#32).
    try:
        if os.environ.get("E2E_SLURM_PARK") == "1":
            park_and_restart(km, kc)
        kids = h.spawn_children(kc)
        tree = sorted(set(h.tree_of(km) + list(kids.values())))
        sup = km.provisioner.pid
        probe = start_probe()
        write("ready.json", {
            "supervisor": sup, "kernel": kids["kernel"], "daemon": kids["daemon"], "stubborn": kids["stubborn"], "probe": probe,
            "tree": tree, "tree_desc": h.describe(tree), "driver": os.getpid(), "kernel_id": kernel_id(km),
            "connection_file": km.connection_file, "log": km.e2e_log,
            "cgroups": {"supervisor": cgroups(sup), "kernel": cgroups(kids["kernel"]), "daemon": cgroups(kids["daemon"])},
        })
    except Exception as e:
        h.log(traceback.format_exc())
        write("ready.json", {"error": "%s: %s" % (type(e).__name__, e)})
        return
    h.log("ready; waiting for scancel")
    while True:
        time.sleep(3600)


def park_and_restart(km, kc):
    """tfgpu-kernel stop parks the kernel inside the job; the next cell
    starts a fresh one in the supervisor's place, told why."""
    kid = kernel_id(km)
    out = subprocess.run([os.environ["E2E_TFGPU_BIN"], "stop", kid], capture_output=True, text=True, timeout=60)
    h.note(park_stop=out.stdout.strip(), park_stop_stderr=out.stderr.strip())
    if not expect(out.returncode == 0 and "parked by its supervisor" in out.stdout,
                  "stop %s inside the job: exit %d %r %r" % (kid, out.returncode, out.stdout, out.stderr)):
        raise RuntimeError(ERRORS[-1])  # ready.json says so, and the test fails
    r = h.execute(kc, "print('fresh')", timeout=60)
    h.note(park_first_cell_stderr=r["stderr"])
    if not expect(r["stdout"].strip() == "fresh" and "fresh kernel" in r["stderr"], "the first cell after the park: %r %r" % (r["stdout"], r["stderr"])):
        raise RuntimeError(ERRORS[-1])


def next_kernel():
    h.note(job=job_env())
    try:
        km, kc = h.start_kernel()
        h.note(kernel_id=kernel_id(km), supervisor=km.provisioner.pid)
        h.assert_answers(kc, "the next job's kernel")
        km.shutdown_kernel()
    except Exception as e:
        expect(False, "the next job's kernel: %s: %s" % (type(e).__name__, e))
        h.log(traceback.format_exc())
        h._log_tails()
    result("next.json")


def memory():
    """Two kernels, one after the other, in a job with --mem."""
    h.note(job=job_env(), driver_cgroups=cgroups(os.getpid()))
    want = os.environ.get("E2E_SLURM_MEM_TEXT", "the Slurm job's memory limit of 400 MiB")
    try:
        km, kc = h.start_kernel()
        old = h.tree_of(km)
        h.note(kernel_id_oom=kernel_id(km), oom_kernel_cgroups=cgroups(km.provisioner.pid))
        # bytes * n writes every page, unlike bytearray(n).
        msg_id = kc.execute("import time\ntime.sleep(0.2)\nb = b'x' * (1500 << 20)\nprint('survived', len(b))")
        t0 = time.monotonic()
        r = h.collect(kc, msg_id, timeout=40, need_idle=True)
        h.note(oom_cell_s=round(time.monotonic() - t0, 3), oom_cell_status=r["status"], oom_cell_stderr=r["stderr"][-1500:],
               oom_cell_stdout=r["stdout"][-300:], oom_reply=(r["reply"] or {}).get("ename"), oom_supervisor_alive=km.is_alive(),
               oom_supervisor_rc=km.provisioner.process.returncode if km.provisioner and km.provisioner.process else None)
        expect("survived" not in r["stdout"], "memory: the cell touching 1.5 GB ran to the end under --mem=400M")
        expect(want in r["stderr"], "memory: the cell's stderr does not contain %r: %r" % (want, r["stderr"][-800:]))
        left = h.wait_dead([p for p in old if p != km.provisioner.pid], 2.0)
        h.note(oom_survivors=h.describe(left))
        try:
            if km.is_alive():
                km.shutdown_kernel(now=True)
        except Exception as e:
            h.log("memory: shutdown after the OOM: %r" % e)
    except Exception as e:
        expect(False, "memory (the job's limit): %s: %s" % (type(e).__name__, e))
        h.log(traceback.format_exc())
        h._log_tails()

    limit_note()
    result("memory.json")


def limit_only():
    """A kernel given TFGPU_MEMORY_LIMIT in a job (--mem) that has no memory
    cgroup of its own: told that no memory limit applies."""
    h.note(job=job_env(), driver_cgroups=cgroups(os.getpid()))
    limit_note()
    result("limit.json")


def limit_note():
    """A kernel given TFGPU_MEMORY_LIMIT in a job is told, in its first
    cell, that the limit is not applied there and which limit holds."""
    want2 = os.environ.get("E2E_SLURM_LIMIT_TEXT", "is not applied inside Slurm job {job}").replace(
        "{job}", os.environ.get("SLURM_JOB_ID", "?"))
    try:
        os.environ["TFGPU_MEMORY_LIMIT"] = "300M"
        km, kc = h.start_kernel()
        del os.environ["TFGPU_MEMORY_LIMIT"]
        h.note(kernel_id_limit=kernel_id(km))
        h.note(limit_kernel_cgroups=cgroups(h.kernel_pid(kc)))
        # The notice goes to the first cell the kernel ran: one of the
        # no-op cells start_kernel runs until iopub answers. Their stderr is
        # kept (FIRST_STDERR), with this cell's and kernel_pid's.
        r = h.execute(kc, "print('first')")
        h.note(limit_cell_stderr=r["stderr"][-800:])
        with open(km.e2e_log, "rb") as f:
            logtext = f.read().decode(errors="replace")
        h.note(limit_supervisor_log=logtext[-1500:])
        first = FIRST_STDERR.get(id(kc), "") + r["stderr"]
        h.note(limit_first_cells_stderr=first[-800:])
        expect(want2 in first, "memory: with TFGPU_MEMORY_LIMIT=300M in a job, no cell's stderr contains %r: first cells' stderr %r; supervisor log %r" % (
            want2, first[-800:], logtext[-800:]))
        km.shutdown_kernel()
    except Exception as e:
        expect(False, "memory (TFGPU_MEMORY_LIMIT in a job): %s: %s" % (type(e).__name__, e))
        h.log(traceback.format_exc())
        h._log_tails()

    # doctor inside the job tells the limit the first cell was told
    # (engine.SlurmLimit: one text), and nothing there is a problem.
    try:
        from jupyter_client.kernelspec import KernelSpecManager
        binp = KernelSpecManager().get_kernel_spec(os.environ.get("E2E_KERNEL", "tfgpu")).argv[0]
        p = subprocess.run([binp, "doctor"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        out = p.stdout
        h.note(doctor=out.splitlines(), doctor_rc=p.returncode)
        holds = want2.split(": ", 1)[1] if ": " in want2 else want2
        for w in ("inside Slurm job " + os.environ.get("SLURM_JOB_ID", "?"), "--memory-limit is not applied inside a Slurm job: " + holds,
                  "proc inside a Slurm job"):
            expect(w in out, "doctor inside the job does not say %r:\n%s" % (w, out))
    except Exception as e:
        expect(False, "doctor inside the job: %s: %s" % (type(e).__name__, e))


# harness.start_kernel runs no-op cells (wait_iopub) before anything of ours,
# and the supervisor tells its notices to the first cell: keep their stderr.
FIRST_STDERR = {}
_execute = h.execute


def _keep_stderr(kc, code, *a, **kw):
    r = _execute(kc, code, *a, **kw)
    FIRST_STDERR[id(kc)] = FIRST_STDERR.get(id(kc), "") + r["stderr"]
    return r


h.execute = _keep_stderr

if __name__ == "__main__":
    h.log("driver %s: pid %d, job %s" % (PART, os.getpid(), os.environ.get("SLURM_JOB_ID")))
    try:
        {"restart-scancel": restart_scancel, "next": next_kernel, "memory": memory, "limit": limit_only}[PART]()
    finally:  # not reached by the driver scancel ends (SIGTERM)
        h._cleanup()
