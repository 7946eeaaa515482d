"""Scenario 5: the kernel dies by os._exit(3) or by SIGSEGV (argv[1]: "exit"
or "segv") while a cell runs and while it has a setsid'd daemon and a
SIGTERM-ignoring child. With the supervisor: that cell gets an iopub stderr
stream naming the cause, the supervisor (the process jupyter_client
started) exits non-zero, nothing of the tree survives; then jupyter_client's
KernelRestarter (what the server's autorestart runs) brings up a fresh kernel
that answers."""

import os
import signal
import sys
import time

from jupyter_client.restarter import KernelRestarter

import harness as h

HOW = sys.argv[1] if len(sys.argv) > 1 else "exit"
CODE = {
    "exit": "import os, time\ntime.sleep(0.2)\nos._exit(3)",
    "segv": "import os, signal, time\ntime.sleep(0.2)\nos.kill(os.getpid(), signal.SIGSEGV)",
}[HOW]
CAUSE = {"exit": ("exit code 3", "exit status 3"), "segv": ("SIGSEGV",)}[HOW]


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
    h.check(any(c in r["stderr"] for c in CAUSE),
            "the running cell got no stderr stream naming %s; stderr %r, iopub %s" % (" or ".join(CAUSE), r["stderr"], h.types(r)))
    h.check(not left, "survivors of the dead kernel's tree: %s" % h.describe(left))
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass

    # What the server's autorestart does: KernelRestarter.poll() sees the
    # process dead and calls restart_kernel(now=True, ...).
    restarted = []
    rs = KernelRestarter(kernel_manager=km, restart_limit=3)
    rs.add_callback(lambda: restarted.append(time.monotonic()), "restart")
    t1 = time.monotonic()
    rs.poll()
    assert restarted, "KernelRestarter did not restart the dead kernel"
    kc.stop_channels()
    kc = h.connect(km)
    h.track(km.provisioner.pid, h.kernel_pid(kc))
    h.assert_answers(kc, "kernel after autorestart")
    h.note(autorestart_to_ready_s=round(time.monotonic() - t1, 3))
    km.shutdown_kernel()


h.run(main)
