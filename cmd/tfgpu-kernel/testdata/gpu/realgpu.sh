#!/bin/bash
# The real-GPU check (docs/testing.md#the-real-gpu-check), both ways it is
# run: on the host, and again inside a new PID namespace (unshare), where
# the supervisor attributes GPU memory by baseline as in a pod. Run it in
# the repository's root on the GPU host, as root (unshare), with the test
# binary built elsewhere:
#
#	go test -c -ldflags=-extldflags=-Wl,-z,lazy -o tfgpu-realgpu.test ./cmd/tfgpu-kernel
#	cmd/tfgpu-kernel/testdata/gpu/realgpu.sh ./tfgpu-realgpu.test OUTDIR
#
# OUTDIR gets env.txt (driver, GPU, cgroups), tests.txt (both runs' test
# output), and host/ and pidns/ with realgpu.json and the supervisor logs.
set -o pipefail
T=${1:?usage: realgpu.sh TEST-BINARY OUTDIR}
OUT=${2:?usage: realgpu.sh TEST-BINARY OUTDIR}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/host" "$OUT/pidns"
{
	date -u; uname -r; nvidia-smi; readlink /proc/self/ns/pid
	ldconfig -p | grep nvidia-ml; stat -fc %T /sys/fs/cgroup
	command -v python3 unshare
	python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))'
} >"$OUT/env.txt" 2>&1
rc=0
echo "== host" >>"$OUT/tests.txt"
TFGPU_REAL_GPU=1 TFGPU_REAL_GPU_OUT=$OUT/host timeout 240 "$T" -test.run TestRealGPU -test.v 2>&1 |
	tee -a "$OUT/tests.txt" || rc=1
echo "== pidns" >>"$OUT/tests.txt"
TFGPU_REAL_GPU=1 TFGPU_REAL_GPU_OUT=$OUT/pidns timeout 150 \
	unshare --pid --fork --mount-proc --kill-child "$T" -test.run 'TestRealGPU/sigterm' -test.v 2>&1 |
	tee -a "$OUT/tests.txt" || rc=1
echo "== after: rc=$rc" >>"$OUT/tests.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$OUT/env.txt" 2>&1
exit $rc
