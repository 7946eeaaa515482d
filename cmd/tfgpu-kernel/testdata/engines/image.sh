#!/bin/sh
# Builds the container image of the podman end-to-end test
# (e2e_podman_test.go) from Debian's own packages, with no registry:
# a minbase debootstrap of bookworm with Debian's Jupyter stack, imported
# into podman's store as TAG. The tfgpu-kernel binary is not in it: the
# test bind-mounts the one it built (same Debian 12 glibc).
#
#   image.sh TAG [MIRROR]
#
# The test names TAG localhost/tfgpu-engine:<hash of this file>, so a
# change here (the package list included) builds a new image; an
# unchanged one is reused. Needs root, debootstrap and podman; the
# debootstrap tree lives in a temporary directory, removed at the end.
set -eu
tag=$1
mirror=${2:-http://deb.debian.org/debian}
# debootstrap resolves no virtual package, so the two providers that
# bookworm's Jupyter needs are named: python3-cffi-backend (provides
# python3-cffi-backend-api-min/max, for python3-zmq) and libboost-regex1.74.0
# (provides libboost-regex1.74.0-icu72, for gdb, which python3-debugpy
# depends on). Without them those packages stay unconfigured and
# debootstrap fails.
packages=python3,python3-ipykernel,python3-jupyter-client,procps,python3-cffi-backend,libboost-regex1.74.0

dir=$(mktemp -d "${TMPDIR:-/tmp}/tfgpu-engine-rootfs.XXXXXX")
trap 'rm -rf "$dir"' EXIT
debootstrap --variant=minbase --include="$packages" bookworm "$dir/root" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
	echo "debootstrap failed; the end of its log:" >&2
	tail -n 40 "$dir/debootstrap.log" >&2
	tail -n 40 "$dir/root/debootstrap/debootstrap.log" >&2 2>/dev/null || true
	exit 1
}
# Smaller and quieter: apt's caches and lists are not needed at run time.
rm -rf "$dir/root/var/cache/apt/archives/"*.deb "$dir/root/var/lib/apt/lists/"*
tar -C "$dir/root" -c . | podman import -q --change 'CMD ["/bin/sh"]' - "$tag" >/dev/null
podman image exists "$tag"
