"""`jupyter console --kernel tfgpu`, as a terminal user starts it: the
console starts the kernelspec, runs what is typed (here: piped on stdin,
--simple-prompt), shows the output, and on exit shuts the kernel down;
then nothing of the kernel's tree is left."""

import os
import re
import subprocess
import time

import harness as h

CODE = "import os; print('pid', os.getpid(), 'answer', 6 * 7)\nexit\n"


def main():
    argv = [h.PY, "-m", "jupyter_console", "--kernel", h.KERNEL, "--simple-prompt", "-y"]
    out_path = os.path.join(h.TMP, "console.out")
    with open(out_path, "wb") as out:
        p = h.spawn_helper(argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
    h.track(p.pid)
    t0 = time.monotonic()
    try:
        p.communicate(CODE.encode(), timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)
        raise AssertionError("jupyter console still running after 90 s")
    with open(out_path, errors="replace") as f:
        text = f.read()
    h.note(console_s=round(time.monotonic() - t0, 3), console_exit=p.returncode)
    m = re.search(r"pid (\d+) answer 42", text)
    assert p.returncode == 0 and m, "jupyter console exited %s:\n%s" % (p.returncode, text[-4000:])
    kernel = int(m.group(1))
    h.track(kernel)
    exited = time.monotonic()
    later = h.wait_dead([kernel], h.TREE_WAIT)
    h.note(kernel_gone_after_exit_s=round(time.monotonic() - exited, 3) if not later else None)
    h.check(not later, "the kernel is alive %d s after the console exited: %s" % (h.TREE_WAIT, h.describe(later)))


h.run(main)
