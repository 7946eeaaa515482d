"""tfgpu-kernel: Jupyter's "Restart Kernel" as a true hard reset for GPU notebooks.

The wheel installs the supervisor binary as the script ``tfgpu-kernel``
(on PATH beside ``jupyter``), the kernelspec "TF-GPU (clean restart)" in
share/jupyter/kernels/tfgpu and the JupyterLab / Notebook 7 extension in
share/jupyter/labextensions/@tfgpu/kernel-lab. This package only finds the
binary for the kernelspec's launcher (``python -m tfgpu_kernel``); the
supervisor itself is Go (docs/design.md#the-wheel).
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


def _record():
    """pip's RECORD of this package: the installed files' paths, absolute.

    The wheel's paths are relative to site-packages; a script's is
    ../../../bin/tfgpu-kernel or the like, whatever the install scheme
    (venv, --user, /usr/local, conda). Read directly rather than through
    importlib.metadata, whose import and search of sys.path cost the
    launcher ~50 ms at every kernel start and restart.
    """
    site = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(site, "tfgpu_kernel-%s.dist-info" % __version__, "RECORD")
    if not os.path.isfile(path):
        import glob

        found = sorted(glob.glob(os.path.join(site, "tfgpu_kernel-*.dist-info", "RECORD")))
        if not found:
            raise BinaryNotFound("no pip RECORD of the tfgpu-kernel package beside %s; reinstall it: "
                                 "pip install --force-reinstall tfgpu-kernel" % os.path.dirname(os.path.abspath(__file__)))
        path = found[-1]
    with open(path, encoding="utf-8") as f:
        for line in f:
            name = line.rsplit(",", 2)[0]
            yield name, os.path.normpath(os.path.join(site, name))


def binary():
    """The absolute path of the tfgpu-kernel binary installed with this package.

    The wheel carries it as a script, which pip puts in the scheme's scripts
    directory (a venv's bin/, ~/.local/bin for --user, /usr/local/bin ...);
    pip's RECORD says where.
    """
    named = []
    for name, p in _record():
        parts = name.split("/")
        if parts[-1] == "tfgpu-kernel" and len(parts) > 1 and parts[-2] in ("bin", "Scripts"):
            named.append(p)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    raise BinaryNotFound(
        "the tfgpu-kernel binary of this package is missing (pip's record names %s); "
        "reinstall it: pip install --force-reinstall tfgpu-kernel" % (", ".join(named) or "none")
    )


def settings():
    """The settings file of the kernelspec this package installed, if there is one.

    pip's RECORD says where the kernelspec went (PREFIX/share/jupyter/
    kernels/tfgpu); its settings are PREFIX/etc/jupyter/tfgpu-kernel.json.
    """
    for name, p in _record():
        if tuple(name.split("/")[-len(KERNELSPEC):]) == KERNELSPEC:
            prefix = p
            for _ in KERNELSPEC:
                prefix = os.path.dirname(prefix)
            path = os.path.join(prefix, *SETTINGS)
            return path if os.path.isfile(path) else None
    return None
