#!/usr/bin/env bash
# install.sh — build tfgpu-kernel and install it with its Jupyter kernelspec.
# Idempotent: run it again to rebuild and replace both. Needs no stdin.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: ./install.sh [--prefix DIR] [--python PATH] [--no-deps]
       ./install.sh --uninstall [--prefix DIR]

Builds tfgpu-kernel (Go, cgo), installs it as PREFIX/bin/tfgpu-kernel and
writes the user kernelspec "tfgpu" ("TF-GPU (clean restart)").

  --prefix DIR    where the binary goes: DIR/bin
                  (default: /usr/local as root, ~/.local otherwise)
  --python PATH   Python that runs ipykernel (default: /usr/bin/python3 is
                  checked; the kernelspec uses the first of python3 on PATH,
                  /usr/bin/python3 that imports ipykernel)
  --no-deps       never run apt-get; fail if Jupyter pieces are missing
  --uninstall     remove what install.sh installed: the kernelspec "tfgpu"
                  (only if tfgpu-kernel wrote it) and PREFIX/bin/tfgpu-kernel;
                  give the same --prefix as when installing. Running it
                  again is harmless. Kernelspecs made with
                  'tfgpu-kernel install --wrap' are left alone: remove
                  them first ('tfgpu-kernel install --uninstall --wrap NAME').
  -h, --help      this help

Missing Debian/Ubuntu packages (ipykernel, jupyter_client, …) are installed
with apt-get when run as root; otherwise the exact sudo command is printed.

example:
  ./install.sh && jupyter console --kernel tfgpu
EOF
}

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "install.sh: $*"; }

prefix="" python="" deps=1 uninstall=0
while [ $# -gt 0 ]; do
	case "$1" in
	--prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }; prefix=$2; shift 2 ;;
	--prefix=*) prefix=${1#*=}; shift ;;
	--python) [ $# -ge 2 ] || { echo "install.sh: --python needs a path" >&2; exit 2; }; python=$2; shift 2 ;;
	--python=*) python=${1#*=}; shift ;;
	--no-deps) deps=0; shift ;;
	--uninstall) uninstall=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "install.sh: unknown argument '$1' (see ./install.sh --help)" >&2; exit 2 ;;
	esac
done

root=0
[ "$(id -u)" -eq 0 ] && root=1
sudo=""
[ $root -eq 1 ] || sudo="sudo "
default_prefix="$HOME/.local"
[ $root -eq 1 ] && default_prefix=/usr/local
[ -n "$prefix" ] || prefix=$default_prefix
# Absolute now: the build below runs from the repository directory.
prefix=$(realpath -m -- "$prefix")
default_prefix=$(realpath -m -- "$default_prefix")
bin="$prefix/bin/tfgpu-kernel"

# --- uninstall ---------------------------------------------------------------
# Needs neither Go nor Python: the installed binary removes its kernelspec
# (it refuses one it did not write), then the binary goes.
if [ $uninstall -eq 1 ]; then
	if [ ! -e "$bin" ]; then
		say "$bin is not there: nothing to remove (a kernelspec left without it goes with 'jupyter kernelspec remove tfgpu')"
		exit 0
	fi
	if out=$("$bin" install --uninstall </dev/null 2>&1); then
		say "$out"
	else
		case "$out" in
		*"no kernelspec at "*) say "kernelspec tfgpu already removed" ;;
		*) say "kept kernelspec tfgpu: ${out#tfgpu-kernel install: }" ;; # not ours: someone else's to remove
		esac
	fi
	rm -f "$bin"
	say "removed $bin"
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
[ -n "$cc" ] || die "no C compiler (cgo needs one for NVML); install it: ${sudo}apt-get install -y gcc"

# --- Jupyter pieces --------------------------------------------------------
# jupyter-client adds the `jupyter kernelspec` command (Debian splits it out).
pkgs=(python3-ipykernel python3-jupyter-client jupyter-client python3-jupyter-kernel-test
	jupyter-notebook python3-nbclient jupyter-console python3-zmq)
check_py=${python:-/usr/bin/python3}
have_jupyter() { "$check_py" -c 'import ipykernel, jupyter_client' >/dev/null 2>&1; }
apt_cmd="DEBIAN_FRONTEND=noninteractive apt-get install -y ${pkgs[*]}"

if ! have_jupyter; then
	if [ -n "$python" ] && [ "$(readlink -f "$python" 2>/dev/null)" != "$(readlink -f /usr/bin/python3)" ]; then
		die "$python cannot import ipykernel and jupyter_client; install them into it (e.g. '$python -m pip install ipykernel'), or use --python /usr/bin/python3"
	fi
	if [ $deps -eq 0 ] || [ $root -eq 0 ]; then
		die "$check_py cannot import ipykernel and jupyter_client; install them with: sudo $apt_cmd"
	fi
	command -v apt-get >/dev/null 2>&1 || die "$check_py lacks ipykernel/jupyter_client and there is no apt-get; install them by hand"
	# Update the package lists only when one of the packages is unknown.
	for p in "${pkgs[@]}"; do
		if ! apt-cache show "$p" >/dev/null 2>&1; then
			say "apt-get update"
			apt-get update -q </dev/null
			break
		fi
	done
	say "installing ${pkgs[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" </dev/null
	have_jupyter || die "$check_py still cannot import ipykernel and jupyter_client after apt-get"
fi

# --- build -----------------------------------------------------------------
ver=$(git describe --always --dirty 2>/dev/null || echo dev)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
say "building tfgpu-kernel $ver with $(go version | cut -d' ' -f3) and $cc"
# -z lazy: go-nvml resolves NVML symbols at first use, so the binary must
# start on hosts without libnvidia-ml (docs/design.md#gpu-confirmation).
# nvml.h marks many functions deprecated; go-nvml's cgo would warn on each.
CGO_ENABLED=1 CC="$cc" CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations" go build -trimpath \
	-ldflags "-X main.version=$ver -extldflags=-Wl,-z,lazy" \
	-o "$build/tfgpu-kernel" ./cmd/tfgpu-kernel </dev/null

# --- install ---------------------------------------------------------------
mkdir -p "$prefix/bin"
# install(1) unlinks the old file first, so a running supervisor is not disturbed.
install -m 0755 "$build/tfgpu-kernel" "$bin"
say "installed $bin"

args=(install --replace)
[ -n "$python" ] && args+=(--python "$python")
"$bin" "${args[@]}" </dev/null

case ":$PATH:" in
*":$prefix/bin:"*) ;;
*) say "note: $prefix/bin is not on PATH (the kernelspec uses the absolute path, so Jupyter does not care)" ;;
esac
cat <<EOF

Done. Next: run 'jupyter console --kernel tfgpu', or pick "TF-GPU (clean restart)"
in Jupyter's kernel list. Remove both with './install.sh --uninstall$([ "$prefix" = "$default_prefix" ] || printf ' --prefix %q' "$prefix")'.
EOF
