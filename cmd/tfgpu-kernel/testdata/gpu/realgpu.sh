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
# output), host/ and pidns/ with realgpu.json and the supervisor logs, and
# nsview.txt: what NVML lists from inside a PID namespace (with pynvml).
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

# What NVML lists from inside a PID namespace: a holder outside it (1 GiB,
# on the host) and one inside it (2 GiB). Written to nsview.txt.
here=$(cd "$(dirname "$0")" && pwd)
if python3 -c 'import pynvml' 2>/dev/null; then
	n=$(mktemp -d)
	python3 "$here/torch_load.py" --main 1 --children 0 --ready "$n/host" & H=$!
	for _ in $(seq 300); do [ -s "$n/host" ] && break; sleep 0.2; done
	{
		echo "host holder: $(cat "$n/host")"
		echo "== host view"; python3 "$here/nvml_list.py"
		unshare --pid --fork --mount-proc --kill-child bash -c '
			echo "== namespace view, the host holder only"; python3 "$1/nvml_list.py"
			python3 "$1/torch_load.py" --main 2 --children 0 --ready "$2/ns" & N=$!
			for _ in $(seq 300); do [ -s "$2/ns" ] && break; sleep 0.2; done
			echo "namespace holder, as the namespace sees it: $(cat "$2/ns")"
			echo "== namespace view, both"; python3 "$1/nvml_list.py"
			kill -9 $N; wait $N' sh "$here" "$n"
	} >"$OUT/nsview.txt" 2>&1
	kill -9 $H; wait $H
	rm -rf "$n"
else
	echo "no pynvml: namespace view skipped" >"$OUT/nsview.txt"
fi
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$OUT/env.txt" 2>&1
exit $rc
