"""tfgpu-kernel: Jupyter's "Restart Kernel" as a true hard reset for GPU notebooks.

The wheel installs the supervisor binary as the script ``tfgpu-kernel``
(on PATH beside ``jupyter``), the kernelspec "TF-GPU (clean restart)" in
share/jupyter/kernels/tfgpu and the JupyterLab / Notebook 7 extension in
share/jupyter/labextensions/@tfgpu/kernel-lab. This package only finds the
binary for the kernelspec's launcher (``python -m tfgpu_kernel``); the
supervisor itself is Go (docs/design.md#wheel).
"""

import os

try:
    from ._version import __version__, build  # noqa: F401  (written by the build)
except ImportError:  # a checkout, not a built wheel
    __version__, build = "0.0.0+unknown", "dev"

__all__ = ["__version__", "binary", "settings", "BinaryNotFound"]

# Where the admin's settings for the wheel's kernelspec live, relative to
# the prefix of its share/jupyter: a Jupyter config file pip never writes,
# so that upgrades keep it (tfgpu-kernel install writes it).
SETTINGS = ("etc", "jupyter", "tfgpu-kernel.json")
KERNELSPEC = ("share", "jupyter", "kernels", "tfgpu", "kernel.json")


class BinaryNotFound(RuntimeError):
    """pip's record of this package names no binary that is there."""


def binary():
    """The absolute path of the tfgpu-kernel binary installed with this package.

    The wheel carries it as a script, which pip puts in the scheme's scripts
    directory (a venv's bin/, ~/.local/bin for --user, /usr/local/bin ...);
    pip's RECORD says where, relative to site-packages, whatever the scheme.
    """
    dist = _dist()
    named = []
    for f in dist.files or ():
        if f.name == "tfgpu-kernel" and f.parent.name in ("bin", "Scripts"):
            p = os.path.abspath(str(dist.locate_file(f)))
            named.append(p)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    raise BinaryNotFound(
        "the tfgpu-kernel binary of this package is missing (pip's record names %s); "
        "reinstall it: pip install --force-reinstall tfgpu-kernel" % (", ".join(named) or "none")
    )


def _dist():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        return distribution("tfgpu-kernel")
    except PackageNotFoundError as e:
        raise BinaryNotFound("the tfgpu-kernel package is not installed in this Python (%s)" % e) from None


def settings():
    """The settings file of the kernelspec this package installed, if there is one.

    pip's RECORD says where the kernelspec went (PREFIX/share/jupyter/
    kernels/tfgpu); its settings are PREFIX/etc/jupyter/tfgpu-kernel.json.
    """
    dist = _dist()
    for f in dist.files or ():
        if tuple(f.parts[-len(KERNELSPEC):]) == KERNELSPEC:
            spec = os.path.abspath(str(dist.locate_file(f)))
            prefix = spec
            for _ in KERNELSPEC:
                prefix = os.path.dirname(prefix)
            path = os.path.join(prefix, *SETTINGS)
            return path if os.path.isfile(path) else None
    return None
