"""The real-GPU check's load (cmd/tfgpu-kernel/realgpu_test.go): a process
tree that holds GPU memory the way a notebook's does, run by the supervisor
in place of a kernel.

The main process allocates --main GiB on cuda:0 and starts --children
children in sessions of their own (setsid: they escape the process group),
ignoring SIGTERM, each allocating --child GiB. When all of them hold their
memory, the main process writes {"main": pid, "children": [pids]} to
--ready (atomically) and everyone sleeps until killed. Every process
appends its pid to --ready + ".pids" first thing, so that the check knows
them all even when the tree is killed before it is ready (the GPU memory
limit's check).

Needs only PyTorch with CUDA. With --fake it holds the fake NVML's
device 0 through holder.py instead (internal/gpu/gputest), so that the
check itself is tested on machines without a GPU.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

FAKE = "--fake" in sys.argv


def alloc(gib):
    if FAKE:
        import holder
        holder.hold(0, int(gib * 1024))
        return True
    import torch
    t = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda:0")
    t.fill_(1)  # touch it: the memory is really committed
    torch.cuda.synchronize()
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--main", type=float, default=4.0)
    ap.add_argument("--child", type=float, default=3.0)
    ap.add_argument("--children", type=int, default=2)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--as-child", action="store_true")
    ap.add_argument("--fake", action="store_true")
    a = ap.parse_args()
    with open(a.ready + ".pids", "a") as f:
        f.write("%d\n" % os.getpid())
    if a.as_child:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        held = alloc(a.child)
        with open(a.ready + ".children", "a") as f:
            f.write("%d\n" % os.getpid())
        while held is not None:
            time.sleep(3600)
        return
    held = alloc(a.main)
    for _ in range(a.children):
        subprocess.Popen([sys.executable, __file__, "--as-child", "--child", str(a.child), "--ready", a.ready]
                         + (["--fake"] if FAKE else []), start_new_session=True, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    kids = []
    while time.monotonic() < deadline:
        try:
            with open(a.ready + ".children") as f:
                kids = [int(x) for x in f.read().split()]
        except FileNotFoundError:
            pass
        if len(kids) >= a.children:
            break
        time.sleep(0.1)
    with open(a.ready + ".tmp", "w") as f:
        json.dump({"main": os.getpid(), "children": kids}, f)
    os.rename(a.ready + ".tmp", a.ready)
    while held is not None:
        time.sleep(3600)


main()
