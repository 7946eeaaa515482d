"""Memory limit (containment issue): the supervisor runs with
TFGPU_MEMORY_LIMIT=300M (as a kernelspec's env or the server's environment
would set it). A cell that touches 1.5 GB is killed by the out-of-memory
killer; the cell is told it hit the memory limit of 300 MiB, the supervisor
exits non-zero, nothing survives, and jupyter_client's KernelRestarter (the
server's autorestart) brings up a fresh kernel that answers."""

import os

import harness as h


def main():
    os.environ["TFGPU_MEMORY_LIMIT"] = "300M"
    km, kc = h.start_kernel()
    r, rc, left = h.oom_cell(km, kc)
    h.note(returncode=rc, cell_stderr=r["stderr"][-500:], cell_stdout=r["stdout"][-200:])
    h.check(rc != 0, "the supervisor exited %s after the OOM kill; want non-zero" % rc)
    h.check("out-of-memory" in r["stderr"] and "300 MiB" in r["stderr"],
            "the cell was not told it hit the 300 MiB memory limit: stderr %r" % r["stderr"])
    h.check("survived" not in r["stdout"], "the cell ran to the end: the limit did not hold")
    h.check(not left, "survivors: %s" % h.describe(left))

    kc = h.autorestart(km, kc, "killed at its memory limit")
    h.assert_answers(kc, "kernel after the OOM kill and autorestart")
    km.shutdown_kernel()


h.run(main)
