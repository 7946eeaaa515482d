# The spare kernel (docs/design.md#spare-kernel, issue 25): a Python started
# from the kernelspec's interpreter and flags, which imports ipykernel (and
# the preload list) and then waits, before any kernel app is initialized: no
# startup files, no user code, no connection, no GPU context. It speaks on
# two pipes: it writes to fd 4, reads from fd 3.
#
#   -> "ready" <json: {"modules": n, "path": {dir: mtime_ns}}>
#   <- "go" <json: {"argv": [...], "cwd": dir}>   the kernel's argv after the
#                                                 interpreter, as -m runs it
#   -> "going"                                     then it is the kernel
#   -> "stale" <what changed>                      and it exits 3
#
# End of input before "go" (the supervisor gone, or it discarded the spare):
# exit 0. Any line other than "go": exit 2.
import json
import os
import sys


def _out(line):
    os.write(4, (line + "\n").encode())


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
    sys.argv = list(order["argv"])
    _out("going")
    os.close(4)
    kernelapp.launch_new_instance()


_main()
