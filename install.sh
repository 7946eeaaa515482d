#!/usr/bin/env bash
# install.sh — build tfgpu-kernel and install it with its Jupyter kernelspec.
# Run it again to upgrade: what the kernelspec was configured with is kept.
# Needs no stdin. docs/design.md#install says what it decides and why.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: ./install.sh [--user | --system] [--prefix DIR] [--python PATH] [--lab PYTHON] [--no-deps] [-- INSTALL-FLAGS…]
       ./install.sh --uninstall [--with-wraps] [--user | --system] [--prefix DIR] [--lab PYTHON] [-- --name NAME]

Builds tfgpu-kernel (Go, cgo) and installs it with the Jupyter kernelspec
"tfgpu" ("TF-GPU (clean restart)").

  --user          for you (the default): the binary in ~/.local/bin (as root,
                  /usr/local/bin), the kernelspec in your Jupyter data
                  directory ($JUPYTER_DATA_DIR, ~/.local/share/jupyter).
                  As root, say --user or --system when a kernelspec for
                  every user is installed: without either, install.sh
                  refuses to hide it behind root's own or to replace or
                  remove the binary it runs
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
                  npm registry, once). Not as root: it says how to build the
                  wheel as a user and install that. With --uninstall: pip
                  uninstall.
  --no-deps       never run apt-get
  --uninstall     remove what that install wrote: the kernelspec (only one
                  tfgpu-kernel wrote) and the binary; give the same --user,
                  --system or --prefix. Says which kernels still run on it.
                  Other kernelspecs that run the binary (made with
                  'tfgpu-kernel install --wrap') are named and stay
  --with-wraps    with --uninstall: remove those too
  -- FLAGS        passed to 'tfgpu-kernel install': run flags and --env,
                  e.g. -- --gpu-memory-limit 40G --env CUDA_VISIBLE_DEVICES=0
                  (see 'tfgpu-kernel install --help')
  -h, --help      this help

Running it again upgrades: the binary is rebuilt, and the kernelspec keeps
its Python, run flags, --env and display name unless given again.

The build uses go.sum's modules and the local Go only: no go.work, no
GOFLAGS, GOPROXY or 'go env -w' settings (docs/design.md#install). As
root it refuses a checkout, a directory above it, a Go cache or a
toolchain another user could change, naming it.

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

mode="" prefix="" python="" lab="" deps=1 uninstall=0 wraps=0 pass=()
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
	--with-wraps) wraps=1; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; pass=("$@"); break ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
given=$mode # --user or --system as said; "" when left out
mode=${mode:-user}
[ $wraps -eq 0 ] || [ $uninstall -eq 1 ] || usage_error "--with-wraps goes with --uninstall"

root=0
[ "$(id -u)" -eq 0 ] && root=1
if [ "$mode" = system ] && [ $root -eq 0 ]; then
	die "--system installs for every user of this machine: run it as root (sudo ./install.sh --system)"
fi
# Building the extension runs code from PyPI (pip's build backends, at
# whatever version is newest) and from npm (its packages' install scripts,
# the builder): never as root. A wheel installs without running any code
# of the package, so root installs the wheel a user built.
lab_wheel_steps() {
	printf "as yourself, in a checkout of yours: '%s -m pip wheel --no-deps -w ~/tfgpu-lab ./labextension' (npm builds it); then 'sudo %s -m pip install --only-binary :all: ~/tfgpu-lab/tfgpu_kernel_lab-*.whl'" "$1" "$1"
}
if [ -n "$lab" ] && [ $uninstall -eq 0 ] && [ $root -eq 1 ]; then
	die "--lab as root would run npm's and PyPI's build code (packages' install scripts included) as root; nothing installed. Leave --lab out, and for the extension: $(lab_wheel_steps "$lab")"
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
# --user said to the binary too: as root it refuses to guess (kernelspec/command.go, rootWithoutDest),
# and install.sh has decided (above) that root meant it.
[ "$mode" = user ] && dest=(--user)
system_kernels=/usr/local/share/jupyter/kernels # where 'tfgpu-kernel install --system' writes
user_kernels="${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter}/kernels"
# The same install again, for the commands said: upgrade, remove.
again=""
[ "$mode" = system ] && again=" --system"
[ "$mode" = user ] && [ $root -eq 1 ] && again=" --user" # as root, said: leaving it out may be refused
[ "$prefix" = "$default_prefix" ] || again+=$(printf ' --prefix %q' "$prefix")

# --- kernelspecs of ours -------------------------------------------------------
# Read without Python (uninstall needs none) as tfgpu-kernel writes
# kernel.json (kernelspec.encodeSpec: two-space indent, "argv" first,
# metadata.tfgpu an object), so argv[0] is the line after "argv" and is
# compared as JSON writes it. ours KERNELS…: every kernelspec of ours in
# the kernels directories KERNELS…, each once, its directory in
# ours_dirs[] and its argv[0] in ours_bins[].
json_str() { local s=${1//\\/\\\\}; printf '%s' "${s//\"/\\\"}"; }
ours() {
	ours_dirs=() ours_bins=()
	local k d real
	local -A seen=()
	for k in "$@"; do
		for d in "$k"/*/; do
			d=${d%/}
			real=$(realpath -e -- "$d" 2>/dev/null) || continue
			[ -z "${seen[$real]:-}" ] || continue
			seen[$real]=1
			[ -f "$d/kernel.json" ] && grep -q '"tfgpu": {' "$d/kernel.json" || continue
			ours_dirs+=("$d")
			ours_bins+=("$(sed -n '/^  "argv": \[$/{n;s/^    "\(.*\)",$/\1/p;q;}' "$d/kernel.json")")
		done
	done
}

# As root, leaving out --user or --system is a slip when a kernelspec for
# every user is there (#34): root's own kernelspec of the same name hides
# it from root's Jupyter, and the binary in /usr/local/bin, which --user
# puts there too, is the one it runs: replaced under it by an install,
# removed by an uninstall (then no user's kernel starts). Say which.
if [ $root -eq 1 ] && [ -z "$given" ]; then
	name=tfgpu
	for ((i = 0; i < ${#pass[@]}; i++)); do
		case "${pass[$i]}" in
		--name | -name) [ $((i + 1)) -lt ${#pass[@]} ] && name=${pass[$((i + 1))]} ;;
		--name=* | -name=*) name=${pass[$i]#*=} ;;
		esac
	done
	name=${name,,} # Jupyter's names are lower-case
	ours "$system_kernels"
	why=()
	for i in "${!ours_dirs[@]}"; do
		d=${ours_dirs[$i]}
		runs_bin=0
		[ "${ours_bins[$i]}" = "$(json_str "$bin")" ] && [ -e "$bin" ] && runs_bin=1
		if [ $uninstall -eq 1 ]; then
			[ $runs_bin -eq 0 ] || why+=("remove $bin, which the kernelspec for every user $d runs (no user's kernel would start)")
		else
			[ "${d##*/}" != "$name" ] || why+=("write root's own kernelspec \"$name\", which hides the one for every user, $d, from root's Jupyter")
			[ $runs_bin -eq 0 ] || why+=("replace $bin, which $d runs, and not $d")
		fi
	done
	if [ ${#why[@]} -gt 0 ]; then
		usage_error "as root without --user or --system, this would $(printf '%s; and ' "${why[@]}" | sed 's/; and $//'): give --system for every user's, or --user for root's own"
	fi
fi

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
		flags=("${dest[@]}")
		# Its twins too, when the binary knows how (one older than
		# --with-wraps leaves them to the search below). The help is read
		# whole: grep -q ending the pipe early would SIGPIPE the binary.
		help=$("$bin" install --help 2>/dev/null) || true
		case "$help" in
		*--with-wraps*) [ $wraps -eq 0 ] || flags+=(--with-wraps) ;;
		esac
		out=$("$bin" install --uninstall "${flags[@]}" "${pass[@]}" </dev/null 2>&1) || true
		while IFS= read -r l; do
			case "$l" in
			"tfgpu-kernel install: no kernelspec at "*) say "no kernelspec to remove: ${l#tfgpu-kernel install: }" ;;
			"tfgpu-kernel install: "*) say "kept the kernelspec: ${l#tfgpu-kernel install: }" ;; # not ours: someone else's to remove
			*) say "$l" ;;
			esac
		done <<<"$out"
	else
		# The binary is gone already: remove a kernelspec of ours by hand, so
		# that no user is left with one that runs a missing program.
		if [ "$mode" = system ]; then
			kdir=$system_kernels/tfgpu
		else
			kdir=$user_kernels/tfgpu
		fi
		if [ -f "$kdir/kernel.json" ] && grep -q '"tfgpu": {' "$kdir/kernel.json"; then
			rm -rf -- "$kdir"
			say "removed kernelspec \"tfgpu\" from $kdir ($bin was gone already)"
		else
			say "$bin is not there, nor a kernelspec of ours in $kdir"
		fi
	fi
	if [ -e "$bin" ]; then
		rm -f -- "$bin"
		say "removed $bin"
	fi
	# Kernelspecs of ours still running the binary (#34): --wrap twins, or
	# one left in another directory. With --with-wraps they go; else they
	# are named with the command that removes them, which works now that
	# the binary is gone. Jupyter's directories as far as they are known
	# without Python: JUPYTER_PATH's, the user's, the system's.
	kernels=()
	IFS=: read -ra jp <<<"${JUPYTER_PATH:-}"
	for p in "${jp[@]}"; do [ -z "$p" ] || kernels+=("$p/kernels"); done
	ours "${kernels[@]}" "$user_kernels" "$system_kernels" /usr/share/jupyter/kernels
	left=() failed=0
	for i in "${!ours_dirs[@]}"; do
		[ "${ours_bins[$i]}" = "$(json_str "$bin")" ] || continue
		d=${ours_dirs[$i]}
		if [ $wraps -eq 1 ] && rm -rf -- "$d"; then
			say "removed kernelspec \"${d##*/}\" from $d (it ran $bin)"
			continue
		fi
		[ $wraps -eq 0 ] || failed=1
		left+=("\"${d##*/}\" in $d")
	done
	if [ ${#left[@]} -gt 0 ]; then
		say "left $(printf '%s, ' "${left[@]}" | sed 's/, $//'), which ran $bin and cannot start now; remove: ./install.sh --uninstall --with-wraps$again"
	fi
	exit $failed
fi

cd "$(dirname "$(readlink -f "$0")")"
src=$PWD

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

# --- what the build reads ----------------------------------------------------
# Every go command runs in this environment and no other (issue 33): what is
# built is this checkout and the modules go.sum pins, with the local Go.
#   GOENV=off        no 'go env -w' file: its GOFLAGS, GOWORK, GOPROXY… are not read
#   GOWORK=off       no go.work: Go looks for one in every directory above the
#                    checkout, and anyone may write /tmp/go.work (its replace
#                    directives would build another user's code into the binary)
#   GOFLAGS empty    -mod=mod, -modfile and -overlay take sources from elsewhere;
#                    -mod=readonly is given below: go.mod and go.sum as checked in
#   GOTOOLCHAIN=local  no toolchain download, no go1.N found on PATH
#   GOPROXY, GOSUMDB Go's defaults: a fresh box downloads the modules once;
#                    what it gets must match go.sum whoever serves it
#   CGO_CFLAGS       fixed: -include or -fplugin would add code
# GOCACHE, GOMODCACHE and GOPATH (where the caches are) and CC are honoured;
# as root the caches must be root's (checked below).
goenv=(env -i "PATH=$PATH" "HOME=$HOME" GOENV=off GOWORK=off GOFLAGS= GOTOOLCHAIN=local
	GOPROXY=https://proxy.golang.org,direct GOSUMDB=sum.golang.org)
for k in GOCACHE GOMODCACHE GOPATH; do
	[ -z "${!k:-}" ] || goenv+=("$k=${!k}")
done
gorun() { "${goenv[@]}" go "$@"; }
ignored=()
for k in $(compgen -e); do
	case "$k" in
	GOCACHE | GOMODCACHE | GOPATH) ;;
	GO* | CGO_*) ignored+=("$k") ;;
	esac
done
goenvfile=${GOENV:-${XDG_CONFIG_HOME:-$HOME/.config}/go/env}
if [ "$goenvfile" != off ] && [ -s "$goenvfile" ]; then
	ignored+=("$goenvfile (go env -w)")
fi
if [ ${#ignored[@]} -gt 0 ]; then
	say "the build ignores $(printf '%s, ' "${ignored[@]}" | sed 's/, $//'): it builds this checkout with go.sum's modules and the local Go"
fi

# As root, whatever the build reads must be root's: the checkout and every
# file in it, the Go toolchain and the caches, each writable by no one else,
# and the directories above them writable by no one else but with the
# sticky bit (/tmp: others may add files there, a go.work too, but cannot
# replace root's). The user who ran sudo counts as root, as git's
# safe.directory counts them: they can become root anyway.
if [ $root -eq 1 ]; then
	trusted=(0)
	case "${SUDO_UID:-}" in "" | 0 | *[!0-9]*) ;; *) trusted+=("$SUDO_UID") ;; esac
	trusted_uid() {
		local u
		for u in "${trusted[@]}"; do [ "$1" = "$u" ] && return 0; done
		return 1
	}
	writers() { # who besides the owner may write under the octal mode $1
		case $((8#$1 & 8#022)) in
		$((8#022))) echo "its group and everyone" ;;
		$((8#020))) echo "its group" ;;
		*) echo "everyone" ;;
		esac
	}
	refuse() { # refuse PATH ROLE WHY FIX
		die "refusing to build as root: $1 ($2) $3, so another user could change what root builds and installs; $4"
	}
	fix_clone="build from a checkout of root's own (as root: git clone into /usr/local/src)"
	# check_path P ROLE FIX: P and every directory above it, as written
	# and with links resolved. P may not exist yet (a cache): then the
	# nearest directory that does is P.
	check_path() {
		local p=$1 role=$2 fix=$3 self=1 uid mode
		case "$p" in /*) ;; *) die "$role is '$p', not an absolute path" ;; esac
		while [ ! -e "$p" ] && [ ! -L "$p" ]; do p=$(dirname -- "$p"); done
		while :; do
			read -r uid mode < <(stat -c '%u %a' -- "$p")
			trusted_uid "$uid" || refuse "$p" "$role" "belongs to $(stat -c %U -- "$p") (uid $uid)" "$fix"
			if [ ! -L "$p" ] && (((8#$mode & 8#022) != 0)); then
				if [ $self -eq 1 ]; then
					refuse "$p" "$role" "is writable by $(writers "$mode") (mode $(printf %04d "$mode"))" "chmod go-w $p, or $fix"
				elif (((8#$mode & 8#1000) == 0)); then
					refuse "$p" "a directory above $role" "is writable by $(writers "$mode") (mode $(printf %04d "$mode")) without the sticky bit" "chmod go-w $p, or $fix"
				fi
			fi
			[ "$p" != / ] || break
			p=$(dirname -- "$p")
			self=0
		done
		local real
		real=$(readlink -m -- "$1")
		[ "$real" = "$1" ] || check_path "$real" "$role" "$fix"
	}
	check_path "$src" "the checkout" "$fix_clone"
	notours=()
	for u in "${trusted[@]}"; do notours+=(! -uid "$u"); done
	bad=$(find "$src" \( "${notours[@]}" \) -print -quit)
	[ -z "$bad" ] || refuse "$bad" "in the checkout" "belongs to $(stat -c %U -- "$bad") (uid $(stat -c %u -- "$bad"))" "$fix_clone"
	bad=$(find "$src" ! -type l -perm /022 -print -quit)
	[ -z "$bad" ] || refuse "$bad" "in the checkout" "is writable by $(writers "$(stat -c %a -- "$bad")") (mode $(printf %04d "$(stat -c %a -- "$bad")"))" "chmod -R go-w $src, or $fix_clone"
	while IFS= read -r -d '' l; do
		case "$(readlink -m -- "$l")" in
		"$src"/*) ;;
		*) refuse "$l" "in the checkout" "is a link out of it, to $(readlink -- "$l")" "$fix_clone" ;;
		esac
	done < <(find "$src" -type l -print0)
	check_path "$(gorun env GOROOT)" "the Go toolchain, GOROOT" "install Go as root (https://go.dev/dl/ into /usr/local/go)"
	check_path "$(gorun env GOCACHE)" "the Go build cache, GOCACHE" "set GOCACHE to a directory of root's (unset, it is ~/.cache/go-build)"
	check_path "$(gorun env GOMODCACHE)" "the Go module cache, GOMODCACHE" "set GOMODCACHE to a directory of root's (unset, it is ~/go/pkg/mod)"
fi

# --- build -----------------------------------------------------------------
# git looks for a repository in the directories above too (/tmp/.git is
# anyone's): only this checkout's.
ver=$(GIT_CEILING_DIRECTORIES=$(dirname "$src") git -C "$src" describe --always --dirty 2>/dev/null || echo dev)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
say "building tfgpu-kernel $ver with $(gorun version | cut -d' ' -f3) and $cc"
# -z lazy: go-nvml resolves NVML symbols at first use, so the binary must
# start on hosts without libnvidia-ml (docs/design.md#gpu-confirmation).
# nvml.h marks many functions deprecated; go-nvml's cgo would warn on each.
# -buildvcs=false: the version is git describe's, above.
"${goenv[@]}" CGO_ENABLED=1 CC="$cc" CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
	go build -mod=readonly -trimpath -buildvcs=false \
	-ldflags "-X main.stamped=$ver -extldflags=-Wl,-z,lazy" \
	-o "$build/tfgpu-kernel" ./cmd/tfgpu-kernel </dev/null

# --- install ---------------------------------------------------------------
# What is asked is checked before anything is replaced: the new binary is
# put beside the old one under a hidden name and runs 'install --dry-run'
# with the same arguments (every setting checked as run checks it, the
# Python found, --system's root's-whole checks, which need the binary in
# its directory). Only then is it renamed over the old one and the
# kernelspec written: a refused setting leaves the old binary and its
# kernelspec as they were.
fresh=1
[ -e "$bin" ] && fresh=0
if [ ! -d "$prefix/bin" ]; then
	install -d -m 0755 "$prefix/bin" # 0755 whatever the umask: others run it
fi
stage="$prefix/bin/.tfgpu-kernel.new.$$"
trap 'rm -rf "$build"; rm -f -- "$stage"' EXIT
if [ "$mode" = system ]; then
	install -m 0755 -o root -g root "$build/tfgpu-kernel" "$stage"
else
	install -m 0755 "$build/tfgpu-kernel" "$stage"
fi

args=(install --replace "${dest[@]}")
[ -n "$python" ] && args+=(--python "$python")
args+=("${pass[@]}")
# Exit 3: no Python imports ipykernel, and Debian's packages for
# /usr/bin/python3 would give one (never said of a venv or conda env).
rc=0
"$stage" "${args[@]}" --dry-run </dev/null >/dev/null || rc=$?
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
	"$stage" "${args[@]}" --dry-run </dev/null >/dev/null || rc=$?
fi
if [ $rc -ne 0 ]; then
	if [ $fresh -eq 1 ]; then
		say "nothing installed"
	else
		say "nothing changed: $bin and its kernelspec are as they were"
	fi
	exit 1
fi
# rename(2): the old file is unlinked, not written, so a running
# supervisor is not disturbed.
mv -f -- "$stage" "$bin"
say "installed $bin"
rc=0
out=$("$bin" "${args[@]}" </dev/null) || rc=$?
[ -z "$out" ] || printf '%s\n' "$out"
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
# What to try next, with a Jupyter this user has (#34: a JupyterLab venv
# has no 'jupyter console'). 'jupyter SUB' runs the program jupyter-SUB
# found on PATH (or beside jupyter): each is looked for on PATH, then
# beside the kernel's Python (a venv not activated). 'command -v' would
# also take a file it cannot run.
name=$(sed -n 's/^installed kernelspec "\([^"]*\)" .*/\1/p' <<<"$out")
display=$(sed -n 's/^installed kernelspec "[^"]*" ("\(.*\)") in .*/\1/p' <<<"$out")
kpy=$(sed -n 's/^installed kernelspec .*; python \(.*\) (ipykernel [^)]*)$/\1/p' <<<"$out")
: "${name:=tfgpu}" "${display:=TF-GPU (clean restart)}"
runnable() { [ -f "$1" ] && [ -x "$1" ]; }
jupyter_cmd() { # jupyter_cmd SUB: how to run 'jupyter SUB' here, if one can
	local d found="" dirs
	IFS=: read -ra dirs <<<"$PATH"
	for d in "${dirs[@]}"; do
		runnable "${d:-.}/jupyter-$1" && found=1 && break
	done
	if [ -n "$found" ]; then
		for d in "${dirs[@]}"; do
			runnable "${d:-.}/jupyter" && echo "jupyter $1" && return 0
		done
	fi
	d=$(dirname -- "${kpy:-/nonexistent/python}")
	runnable "$d/jupyter" && runnable "$d/jupyter-$1" && printf '%q %s\n' "$d/jupyter" "$1"
}
if c=$(jupyter_cmd console); then
	next="run '$c --kernel $name', or pick \"$display\" in Jupyter's kernel list"
elif c=$(jupyter_cmd lab); then
	next="run '$c' and pick \"$display\" in its launcher"
elif c=$(jupyter_cmd notebook); then
	next="run '$c' and pick \"$display\" for a new notebook"
else
	next="pick \"$display\" in the kernel list of the Jupyter you use (JupyterLab, Notebook, VS Code)"
	if c=$(jupyter_cmd kernelspec); then
		next+="; '$c list' shows it as $name"
	fi
fi
[ "$mode" != system ] || next="every user's Jupyter lists \"$display\"; to try it: $next"
cat <<EOF

Done. Next: $next.
Upgrade: './install.sh$again' again. Remove: './install.sh --uninstall$again'.
EOF
if [ -z "$lab" ] && [ $root -eq 1 ]; then
	echo "The GPU in JupyterLab's status bar: $(lab_wheel_steps PYTHON), PYTHON the one that runs JupyterLab."
elif [ -z "$lab" ]; then
	echo "The GPU in JupyterLab's status bar: './install.sh$again --lab PYTHON', PYTHON the one that runs JupyterLab (npm builds it)."
fi
