"""The wheel's kernelspec launcher: ``python -m tfgpu_kernel [RUN FLAGS] -f CONNECTION_FILE``.

jupyter_client runs the kernelspec's bare "python" as the Python of the
server (as for ipykernel's own "Python 3"); this replaces itself (execv:
the same pid, which Jupyter signals) with

    tfgpu-kernel run [RUN FLAGS] -f CONNECTION_FILE -- PYTHON -m ipykernel_launcher -f CONNECTION_FILE

so ipykernel runs in that same environment, under the supervisor; with
``--settings PREFIX/etc/jupyter/tfgpu-kernel.json`` first when the admin
configured the kernelspec (``tfgpu-kernel install``), which run reads.
"""

import os
import sys


def kernel_argv(binary, args, python, settings=None):
    """The supervisor's argv for the launcher's args, or ValueError."""
    if len(args) < 2 or args[-2] != "-f" or not args[-1] or "--" in args:
        raise ValueError("usage: python -m tfgpu_kernel [RUN FLAGS] -f CONNECTION_FILE (got %r)" % (args,))
    conn = args[-1]
    first = ["--settings", settings] if settings else []
    return [binary, "run"] + first + list(args) + ["--", python, "-m", "ipykernel_launcher", "-f", conn]


def main(args=None):
    from . import BinaryNotFound, binary, settings

    args = sys.argv[1:] if args is None else args
    try:
        argv = kernel_argv(binary(), args, sys.executable, settings())
    except (ValueError, BinaryNotFound) as e:
        print("tfgpu-kernel: %s" % e, file=sys.stderr)
        return 2
    os.execv(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main())
