"""Hold a fake NVML device from Python, as a CUDA program holds a real one.

The fake libnvidia-ml.so.1 (testdata/fakenvml.c) lists a process on device N
exactly while it has $FAKE_NVML_ROOT/nvidiaN open; the memory it reports is
the number of bytes registered in $FAKE_NVML_ROOT/ctx/<pid>.<N>. MIG device K
of device N (FAKE_NVML_MIG) is the file nvidiaN-migK, registered in
ctx/<pid>.<N>-mig<K>. Stdlib only, Python 3.11.

In a kernel cell (with this directory on sys.path):

    import holder
    holder.hold(0, 512)                 # this process holds 512 MiB on GPU 0
    holder.hold(1, 256, mig=0)          # and 256 MiB on MIG device 0 of GPU 1
    pid = holder.escape(0, 256, "setsid")  # a holder outside the kernel's group

From a shell or a test:

    python3 holder.py DEV MIB [--mig K] [--setsid | --double-fork] [--ignore-term] [--ready-fd FD]

holds the device, writes "<pid>\\n" to FD once it does (if given), then sleeps
until killed.
"""

import argparse
import os
import signal
import subprocess
import sys

# Device fds stay open for the life of the process: that is the context.
_held = {}  # target ("N" or "N-migK") -> fd
_registered = {}  # target -> bytes registered for this process
_children = []  # Popen objects of escaped holders: one dropped while running warns


def _root():
    root = os.environ.get("FAKE_NVML_ROOT")
    if not root:
        raise RuntimeError("FAKE_NVML_ROOT is not set")
    return root


def hold(dev, mib, mig=None):
    """Open device dev (kept open) and register mib more MiB for this process.

    With mig=K it is MIG device K of dev that is held instead (the fake's
    FAKE_NVML_MIG must give dev more than K MIG devices).

    The device is opened before the registration is written: the fake relies
    on that order to tell a new holder from one that has gone.
    """
    root = _root()
    target = "%d" % dev if mig is None else "%d-mig%d" % (dev, mig)
    if target not in _held:
        _held[target] = os.open(os.path.join(root, "nvidia" + target), os.O_RDWR)
    _registered[target] = _registered.get(target, 0) + int(mib) * 1024 * 1024
    pid = os.getpid()
    ctx = os.path.join(root, "ctx", "%d.%s" % (pid, target))
    tmp = os.path.join(root, "ctx", ".tmp.%d.%s" % (pid, target))
    with open(tmp, "w") as f:
        f.write("%d" % _registered[target])
    os.replace(tmp, ctx)  # readers never see a partial number


def escape(dev, mib, how):
    """Start a holder of mib MiB on dev that escapes this process group.

    how is "setsid" (a new session), "double_fork" (a new session, then
    reparented away from us: a daemon) or "ignore_term" (a new process group,
    ignoring SIGTERM). Returns the holder's pid once it holds the device.
    """
    flags = {
        "setsid": ["--setsid"],
        "double_fork": ["--double-fork"],
        "ignore_term": ["--ignore-term"],
    }
    if how not in flags:
        raise ValueError("escape: how must be one of %s, not %r" % (sorted(flags), how))
    r, w = os.pipe()
    argv = [sys.executable, os.path.abspath(__file__), str(dev), str(mib),
            "--ready-fd", str(w)] + flags[how]
    try:
        # subprocess forks and execs in C, so this is safe in a threaded kernel.
        # Its stdout stays away from ours: a reader waiting for EOF on the
        # kernel's stdout must not wait for the escaped holder too.
        p = subprocess.Popen(argv, pass_fds=(w,), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL,
                             process_group=0 if how == "ignore_term" else None)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    with os.fdopen(r) as ready:
        line = ready.readline()  # EOF without a line: it died first
    if how == "double_fork":
        p.wait()  # the intermediate exits once its child is on its own
    else:
        _children.append(p)
    if not line.strip():
        raise RuntimeError("escape(%r): the holder exited before holding GPU %d" % (how, dev))
    return int(line)


def main(argv):
    ap = argparse.ArgumentParser(description="Hold a fake NVML device until killed.")
    ap.add_argument("dev", type=int)
    ap.add_argument("mib", type=int)
    ap.add_argument("--mig", type=int, help="hold MIG device K of DEV instead of all of it")
    ap.add_argument("--setsid", action="store_true", help="start a new session first")
    ap.add_argument("--double-fork", action="store_true",
                    help="new session, fork, and let the parent exit (a daemon)")
    ap.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM")
    ap.add_argument("--ready-fd", type=int, help="write '<pid>\\n' here once holding")
    args = ap.parse_args(argv)

    if args.setsid or args.double_fork:
        os.setsid()
    if args.double_fork and os.fork() != 0:
        os._exit(0)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hold(args.dev, args.mib, args.mig)
    if args.ready_fd is not None:
        os.write(args.ready_fd, b"%d\n" % os.getpid())
        os.close(args.ready_fd)
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
