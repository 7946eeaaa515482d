#!/usr/bin/env bash
# install.sh — build tfgpu-kernel and install it with its Jupyter kernelspec.
# Run it again to upgrade: what the kernelspec was configured with is kept.
# Needs no stdin. docs/design.md#install says what it decides and why.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: ./install.sh [--user | --system] [--prefix DIR] [--python PATH] [--lab PYTHON] [--no-deps] [-- INSTALL-FLAGS…]
       ./install.sh --uninstall [--user | --system] [--prefix DIR] [--lab PYTHON] [-- --name NAME]

Builds tfgpu-kernel (Go, cgo) and installs it with the Jupyter kernelspec
"tfgpu" ("TF-GPU (clean restart)").

  --user          for you (the default): the binary in ~/.local/bin (as root,
                  /usr/local/bin), the kernelspec in your Jupyter data
                  directory ($JUPYTER_DATA_DIR, ~/.local/share/jupyter)
  --system        for every user of this machine (as root): the binary in
                  /usr/local/bin, the kernelspec in
                  /usr/local/share/jupyter/kernels, both root's and
                  read-only to others; the Python must be root's too
  --prefix DIR    put the binary in DIR/bin instead
  --python PATH   the Python that runs ipykernel, e.g. a venv's or a conda
                  env's bin/python3 (default: on an upgrade the one the
                  kernelspec runs; else python3 on PATH if it imports
                  ipykernel; else /usr/bin/python3)
  --lab PYTHON    also the JupyterLab / Notebook 7 extension (the GPU in the
                  status bar, a notification after Restart and Shut Down):
                  'PYTHON -m pip install ./labextension' into the Python
                  that runs JupyterLab; builds with npm (needs npm and the
                  npm registry, once). With --uninstall: pip uninstall.
  --no-deps       never run apt-get
  --uninstall     remove what that install wrote: the kernelspec (only one
                  tfgpu-kernel wrote) and the binary; give the same --user,
                  --system or --prefix. Says which kernels still run on it.
                  Kernelspecs made with 'tfgpu-kernel install --wrap' stay:
                  remove them with 'tfgpu-kernel install --uninstall --wrap NAME'.
  -- FLAGS        passed to 'tfgpu-kernel install': run flags and --env,
                  e.g. -- --gpu-memory-limit 40G --env CUDA_VISIBLE_DEVICES=0
                  (see 'tfgpu-kernel install --help')
  -h, --help      this help

Running it again upgrades: the binary is rebuilt, and the kernelspec keeps
its Python, run flags, --env and display name unless given again.

If no Python imports ipykernel: as root, Debian's packages are installed
with apt-get for /usr/bin/python3 (never for a venv or conda env); otherwise
the exact command is printed (pip for a venv, conda for a conda env).

examples:
  ./install.sh && jupyter console --kernel tfgpu
  ./install.sh --python ~/venvs/tf/bin/python3
  sudo ./install.sh --system -- --gpu-memory-limit 40G
EOF
}

say() { echo "install.sh: $*"; }
die() { echo "install.sh: $*" >&2; exit 1; }
usage_error() { echo "install.sh: $* (see ./install.sh --help)" >&2; exit 2; }

mode="" prefix="" python="" lab="" deps=1 uninstall=0 pass=()
while [ $# -gt 0 ]; do
	case "$1" in
	--user | --system)
		[ -z "$mode" ] || [ "$mode" = "${1#--}" ] || usage_error "--user and --system are exclusive"
		mode=${1#--}; shift ;;
	--prefix) [ $# -ge 2 ] || usage_error "--prefix needs a directory"; prefix=$2; shift 2 ;;
	--prefix=*) prefix=${1#*=}; shift ;;
	--python) [ $# -ge 2 ] || usage_error "--python needs a path"; python=$2; shift 2 ;;
	--python=*) python=${1#*=}; shift ;;
	--lab) [ $# -ge 2 ] || usage_error "--lab needs the Python that runs JupyterLab"; lab=$2; shift 2 ;;
	--lab=*) lab=${1#*=}; shift ;;
	--no-deps) deps=0; shift ;;
	--uninstall) uninstall=1; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; pass=("$@"); break ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
mode=${mode:-user}

root=0
[ "$(id -u)" -eq 0 ] && root=1
if [ "$mode" = system ] && [ $root -eq 0 ]; then
	die "--system installs for every user of this machine: run it as root (sudo ./install.sh --system)"
fi
default_prefix="$HOME/.local"
[ $root -eq 1 ] && default_prefix=/usr/local
[ -n "$prefix" ] || prefix=$default_prefix
# Absolute now: the build below runs from the repository directory. The
# prefix is a directory of ours to write; a --python is never resolved
# (a venv's bin/python3 is a link to the interpreter it was made from).
prefix=$(realpath -m -- "$prefix")
default_prefix=$(realpath -m -- "$default_prefix")
bin="$prefix/bin/tfgpu-kernel"
dest=()
[ "$mode" = system ] && dest=(--system)

# --- uninstall ---------------------------------------------------------------
# Needs neither Go nor Python nor the jupyter command: the installed binary
# removes its kernelspec (it refuses one it did not write) and says which
# kernels still run on it; then the binary goes.
if [ $uninstall -eq 1 ]; then
	if [ -n "$lab" ]; then
		"$lab" -m pip uninstall -y -q tfgpu_kernel_lab </dev/null || die "$lab -m pip uninstall tfgpu_kernel_lab failed"
		say "removed the JupyterLab extension from $lab"
	fi
	if [ -x "$bin" ]; then
		if out=$("$bin" install --uninstall "${dest[@]}" "${pass[@]}" </dev/null 2>&1); then
			while IFS= read -r l; do say "$l"; done <<<"$out"
		else
			case "$out" in
			*"no kernelspec at "*) say "no kernelspec to remove: ${out#tfgpu-kernel install: }" ;;
			*) say "kept the kernelspec: ${out#tfgpu-kernel install: }" ;; # not ours: someone else's to remove
			esac
		fi
	else
		# The binary is gone already: remove a kernelspec of ours by hand, so
		# that no user is left with one that runs a missing program.
		if [ "$mode" = system ]; then
			kdir=/usr/local/share/jupyter/kernels/tfgpu
		else
			kdir="${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter}/kernels/tfgpu"
		fi
		if [ -f "$kdir/kernel.json" ] && grep -q '"tfgpu": {' "$kdir/kernel.json"; then
			rm -rf -- "$kdir"
			say "removed kernelspec \"tfgpu\" from $kdir ($bin was gone already)"
		else
			say "$bin is not there, nor a kernelspec of ours in $kdir: nothing to remove"
			exit 0
		fi
	fi
	if [ -e "$bin" ]; then
		rm -f -- "$bin"
		say "removed $bin"
	fi
	exit 0
fi

cd "$(dirname "$(readlink -f "$0")")"

# --- toolchain -------------------------------------------------------------
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 ||
	die "Go not found (looked on PATH and in /usr/local/go/bin); install it from https://go.dev/dl/ (go.mod says $(sed -n 's/^go //p' go.mod))"
cc=""
for c in "${CC:-}" gcc cc; do
	if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
done
sudo="sudo "
[ $root -eq 1 ] && sudo=""
[ -n "$cc" ] || die "no C compiler (cgo needs one for NVML); install it: ${sudo}apt-get install -y gcc"

# --- build -----------------------------------------------------------------
ver=$(git describe --always --dirty 2>/dev/null || echo dev)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
say "building tfgpu-kernel $ver with $(go version | cut -d' ' -f3) and $cc"
# -z lazy: go-nvml resolves NVML symbols at first use, so the binary must
# start on hosts without libnvidia-ml (docs/design.md#gpu-confirmation).
# nvml.h marks many functions deprecated; go-nvml's cgo would warn on each.
CGO_ENABLED=1 CC="$cc" CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations" go build -trimpath \
	-ldflags "-X main.stamped=$ver -extldflags=-Wl,-z,lazy" \
	-o "$build/tfgpu-kernel" ./cmd/tfgpu-kernel </dev/null

# --- install ---------------------------------------------------------------
fresh=1
[ -e "$bin" ] && fresh=0
if [ ! -d "$prefix/bin" ]; then
	install -d -m 0755 "$prefix/bin" # 0755 whatever the umask: others run it
fi
# install(1) unlinks the old file first, so a running supervisor is not disturbed.
if [ "$mode" = system ]; then
	install -m 0755 -o root -g root "$build/tfgpu-kernel" "$bin"
else
	install -m 0755 "$build/tfgpu-kernel" "$bin"
fi
say "installed $bin"

args=(install --replace "${dest[@]}")
[ -n "$python" ] && args+=(--python "$python")
args+=("${pass[@]}")
# Exit 3: no Python imports ipykernel, and Debian's packages for
# /usr/bin/python3 would give one (never said of a venv or conda env).
rc=0
"$bin" "${args[@]}" </dev/null || rc=$?
if [ $rc -eq 3 ] && [ $root -eq 1 ] && [ $deps -eq 1 ] && command -v apt-get >/dev/null 2>&1; then
	pkgs=(python3-ipykernel python3-jupyter-client jupyter-client python3-jupyter-kernel-test
		jupyter-notebook python3-nbclient jupyter-console python3-zmq)
	# Update the package lists only when one of the packages is unknown.
	for p in "${pkgs[@]}"; do
		if ! apt-cache show "$p" >/dev/null 2>&1; then
			say "apt-get update"
			apt-get update -q </dev/null
			break
		fi
	done
	say "installing Debian's Jupyter packages for /usr/bin/python3: ${pkgs[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" </dev/null
	rc=0
	"$bin" "${args[@]}" </dev/null || rc=$?
fi
if [ $rc -ne 0 ]; then
	if [ $fresh -eq 1 ]; then
		rm -f -- "$bin" # nothing left behind by an install that did not happen
		say "nothing installed: removed $bin again"
	fi
	exit 1
fi

# --- the JupyterLab extension (labextension/) ---------------------------------
# A prebuilt extension: pip builds it with npm once, the installed wheel
# needs no network. Only when asked: most installs have no npm.
if [ -n "$lab" ]; then
	command -v npm >/dev/null 2>&1 ||
		die "--lab: npm builds the extension and is not on PATH; install it (${sudo}apt-get install -y npm) or leave --lab out (the kernel is installed)"
	say "building and installing the JupyterLab extension into $lab (npm, a minute the first time)"
	"$lab" -m pip install --disable-pip-version-check --no-input -q "$PWD/labextension" </dev/null ||
		die "--lab: $lab -m pip install ./labextension failed (the kernel is installed)"
	say "installed the JupyterLab extension tfgpu_kernel_lab into $lab: reload JupyterLab's page"
fi

case ":$PATH:" in
*":$prefix/bin:"*) ;;
*) say "note: $prefix/bin is not on PATH (the kernelspec uses the absolute path, so Jupyter does not care)" ;;
esac
if [ "$mode" = user ] && [ $root -eq 1 ]; then
	say "note: the kernelspec is root's own; to install for every user of this machine: ./install.sh --system"
fi
again=""
[ "$mode" = system ] && again=" --system"
[ "$prefix" = "$default_prefix" ] || again+=$(printf ' --prefix %q' "$prefix")
cat <<EOF

Done. Next: run 'jupyter console --kernel tfgpu', or pick "TF-GPU (clean restart)"
in Jupyter's kernel list. Upgrade: './install.sh$again' again. Remove: './install.sh --uninstall$again'.
EOF
if [ -z "$lab" ]; then
	echo "The GPU in JupyterLab's status bar: './install.sh$again --lab PYTHON', PYTHON the one that runs JupyterLab (npm builds it)."
fi
