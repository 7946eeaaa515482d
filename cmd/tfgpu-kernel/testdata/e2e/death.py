"""Scenario 5: the kernel dies by os._exit(3) or by SIGSEGV (argv[1]: "exit"
or "segv") while a cell runs and while it has a setsid'd daemon and a
SIGTERM-ignoring child. With the supervisor: that cell gets an iopub stderr
stream naming the cause, the supervisor (the process jupyter_client
started) exits non-zero, nothing of the tree survives; then jupyter_client's
KernelRestarter (what the server's autorestart runs) brings up a fresh kernel
that answers.

"idle": a thread SIGSEGVs the kernel a second after its cell finished, so
no cell is running to be told. With the supervisor, the first cell of the
fresh kernel is told instead, once (the death notice)."""

import os
import signal
import sys
import time

import harness as h

HOW = sys.argv[1] if len(sys.argv) > 1 else "exit"
CODE = {
    "exit": "import os, time\ntime.sleep(0.2)\nos._exit(3)",
    "segv": "import os, signal, time\ntime.sleep(0.2)\nos.kill(os.getpid(), signal.SIGSEGV)",
    "idle": "import os, signal, threading\nthreading.Timer(1.0, os.kill, (os.getpid(), signal.SIGSEGV)).start()",
}[HOW]
CAUSE = {"exit": ("exit code 3", "exit status 3"), "segv": ("SIGSEGV",), "idle": ("SIGSEGV",)}[HOW]


def main():
    km, kc = h.start_kernel()
    kids = h.spawn_children(kc)
    old = sorted(set(h.tree_of(km) + list(kids.values())))

    msg_id = kc.execute(CODE)
    t0 = time.monotonic()
    # Wait for the process jupyter_client started to exit, then drain iopub
    # for what the supervisor told the cell.
    while km.is_alive() and time.monotonic() - t0 < 20:
        time.sleep(0.05)
    exited_after = time.monotonic() - t0
    assert not km.is_alive(), "the kernel process jupyter_client started is still alive 20 s after the kernel died"
    rc = km.provisioner.process.returncode
    r = h.collect(kc, msg_id, timeout=1.5, need_idle=True)
    left = h.wait_dead(old, 2.0)
    h.note(exited_after_s=round(exited_after, 3), returncode=rc, cell_stderr=r["stderr"][-500:],
           cell_iopub=h.types(r), other_iopub=r["other_iopub"], reply=r["reply"], survivors=h.describe(left))

    h.check(rc != 0, "the supervisor exited %s after the kernel died; want non-zero" % rc)
    if HOW == "idle":
        h.check(r["reply"] and r["reply"].get("status") == "ok" and not r["stderr"],
                "the cell that finished before the death: reply %s, stderr %r" % (r["reply"], r["stderr"]))
    else:
        h.check(any(c in r["stderr"] for c in CAUSE),
                "the running cell got no stderr stream naming %s; stderr %r, iopub %s" % (" or ".join(CAUSE), r["stderr"], h.types(r)))
    h.check(not left, "survivors of the dead kernel's tree: %s" % h.describe(left))
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass

    t1 = time.monotonic()
    kc = h.autorestart(km, kc, "that died", track_kernel=HOW != "idle")
    if HOW == "idle":
        # The first cell of the fresh kernel hears why the last one died,
        # the second does not hear it again.
        first = h.ok(h.execute(kc, "6*7", timeout=30), "the fresh kernel's first cell")
        h.track(h.kernel_pid(kc))
        second = h.ok(h.execute(kc, "6*7", timeout=30), "the fresh kernel's second cell")
        h.note(first_cell_stderr=first["stderr"][-500:])
        if h.WRAPPED:
            h.check("with no cell running" in first["stderr"] and "SIGSEGV" in first["stderr"]
                    and "the previous kernel stopped at" in first["stderr"],
                    "the fresh kernel's first cell was not told why the last one died: %r" % first["stderr"])
            h.check("with no cell running" not in second["stderr"],
                    "the notice was shown twice: %r" % second["stderr"])
    h.assert_answers(kc, "kernel after autorestart")
    h.note(autorestart_to_ready_s=round(time.monotonic() - t1, 3))
    km.shutdown_kernel()


h.run(main)
