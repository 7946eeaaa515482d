# The spare kernel (docs/design.md#spare-kernel, issue 25): a Python started
# from the kernelspec's interpreter and flags, which imports ipykernel (and
# the preload list) and then waits, before any kernel app is initialized: no
# startup files, no user code, no connection, no GPU context. It speaks on
# two pipes: it writes to fd 4, reads from fd 3.
#
#   -> "ready" <json: {"modules": n, "path": {dir: mtime_ns}}>
#   <- "go" <json: {"argv": [...], "cwd": dir,    the kernel's argv after the
#                   "title": [...]}>              interpreter, as -m runs it;
#                                                 its whole argv, for ps
#   -> "going"                                     then it is the kernel
#   -> "stale" <what changed>                      and it exits 3
#
# End of input before "go" (the supervisor gone, or it discarded the spare):
# exit 0. Any line other than "go": exit 2.
#
# Its command line (what ps, pgrep -f and psutil read) is a title: while it
# waits, its arguments after the program (sys.argv[1:]: "/usr/bin/python3
# (tfgpu-kernel spare for kernel 5b2c1e7a)"), from "go" on the "title" of
# the go message: the kernel's argv as a cold start runs it, "PYTHON [flags]
# -m ipykernel_launcher -f ...". Best effort (_retitle).
import json
import os
import sys


def _out(line):
    os.write(4, (line + "\n").encode())


# What the process's argument area holds now: its exec's argv (sys.orig_argv,
# Python 3.10+; older ones keep their command line), later the title written.
_AREA = b"".join(os.fsencode(a) + b"\0" for a in getattr(sys, "orig_argv", ()))


def _retitle(args, mem="/proc/self/mem"):
    """Make the command line read as args joined by spaces, in place.

    The argument area is [arg_start, arg_end) of /proc/self/stat (fields
    48 and 49, proc(5)), as long as the exec's argv; the process writes it
    through /proc/self/mem (its own memory: no ptrace permission needed).
    Its last byte is left not NUL: the kernel then reads it as a
    setproctitle(3) title, up to the first NUL (fs/proc/base.c,
    get_mm_cmdline); were it NUL, it would hand out the whole area, the
    padding as empty arguments. So the title is one string: ps and pgrep -f
    show it as a normal command line and psutil splits it back on spaces
    (an argument with a space in it is split too). A title longer than the
    area is cut, ending in "...". Any failure leaves the command line as it
    is, silently: from "go" on stdout and stderr are the kernel's.
    """
    global _AREA
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()  # field 3 on
        start, end = int(fields[48 - 3]), int(fields[49 - 3])
        size = end - start
        if not _AREA or size != len(_AREA):
            return  # not the area this process knows it has
        title = b" ".join(os.fsencode(a) for a in args)
        if len(title) > size - 2:  # room for its NUL and the last byte
            if size < 5:
                return
            title = title[: size - 5] + b"..."
        area = title + b"\0" * (size - 1 - len(title)) + b" "
        fd = os.open(mem, os.O_RDWR | os.O_CLOEXEC)
        try:
            if os.pread(fd, size, start) != _AREA:
                return  # not the bytes it knows there: leave them
            # A short write (never seen) leaves bytes it does not know.
            _AREA = area if os.pwrite(fd, area, start) == size else b""
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001 — no /proc, a seccomp filter, a kernel without the fields
        pass


def _mtimes(paths):
    out = {}
    for d in paths:
        try:
            out[d] = os.stat(d or ".").st_mtime_ns
        except OSError:
            out[d] = None
    return out


_INIT_MODULES = (
    "ipykernel.debugger", "IPython.core.debugger", "IPython.core.oinspect", "IPython.core.completer",
    "IPython.core.completerlib", "IPython.core.history", "IPython.extensions.storemagic", "sqlite3",
    "tornado.gen", "tornado.locks", "tornado.queues", "tornado.platform.asyncio", "psutil", "pdb", "pydoc",
)


def _main():
    _retitle(sys.argv[1:])
    if sys.path and sys.path[0] == "":
        del sys.path[0]  # ipykernel_launcher does the same
    import importlib

    from ipykernel import kernelapp  # the bulk of a kernel's start
    import ipykernel.ipkernel  # noqa: F401  what initialize() imports next
    import ipykernel.zmqshell  # noqa: F401

    # What the kernel app imports as it initializes, by version (found by
    # diffing sys.modules around IPKernelApp.initialize()): ipykernel 7
    # resolves its debugger and IPython's through traitlets strings then
    # (debugpy alone is ~90 ms). Imports only: nothing here runs user code.
    for name in _INIT_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 — absent in this version: the kernel imports what it needs
            pass
    for name in filter(None, os.environ.pop("TFGPU_SPARE_PRELOAD", "").split(",")):
        importlib.import_module(name)
    paths = list(sys.path)
    # The user site directory is on sys.path only once it exists: the
    # first `pip install --user` creates it, and the spare would not see it.
    import site

    if site.ENABLE_USER_SITE:
        user = site.getusersitepackages()
        if user not in paths:
            paths.append(user)
    before = _mtimes(paths)
    _out("ready " + json.dumps({"modules": len(sys.modules), "path": {d: m for d, m in before.items()}}))
    with os.fdopen(3, "rb", buffering=0) as inp:
        line = inp.readline()
    if not line:
        os._exit(0)
    word, _, rest = line.decode().partition(" ")
    if word != "go":
        os._exit(2)
    order = json.loads(rest)
    # A package installed since (pip install in the notebook, then Restart)
    # changes a directory on sys.path: the spare imported the old world.
    changed = [d for d, m in _mtimes(paths).items() if m != before[d]]
    if changed:
        _out("stale " + json.dumps(changed))
        os._exit(3)
    os.chdir(order["cwd"])
    # Chosen at adoption (CUDA_VISIBLE_DEVICES by --gpus auto): CUDA reads
    # it at its first use, which no import above made.
    os.environ.update(order.get("env") or {})
    sys.argv = list(order["argv"])
    _retitle(order["title"])
    _out("going")
    os.close(4)
    kernelapp.launch_new_instance()


if __name__ == "__main__":  # as -c runs it; a test loads it to call _retitle
    _main()
