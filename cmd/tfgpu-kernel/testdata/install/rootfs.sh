#!/bin/sh
# rootfs.sh DIR [MIRROR] — Debian 11 (bullseye: glibc 2.31, Python 3.9),
# minbase, with python3 and python3-venv only: an older distribution than
# this machine's, with no Go, C compiler or Node, for TestE2EWheel. Made
# with debootstrap from Debian's packages (no image registry). Needs root.
set -eu
dir=$1
mirror=${2:-http://deb.debian.org/debian}
mkdir -p "$dir"
if ! debootstrap --variant=minbase --include=python3,python3-venv bullseye "$dir" "$mirror" >"$dir.log" 2>&1; then
	echo "debootstrap failed; the end of its log:" >&2
	tail -n 40 "$dir.log" >&2
	tail -n 40 "$dir/debootstrap/debootstrap.log" >&2 2>/dev/null || true
	exit 1
fi
rm -f "$dir.log"
mkdir -p "$dir/work"
