#!/bin/sh
# Redraws docs/img/gpu-restart.svg, the README's figure of GPU memory across
# a Jupyter Restart, from a fresh measurement: TestE2EFigureGPURestart runs
# the stock ipykernel and the tfgpu kernel against the fake NVML and writes
# docs/img/gpu-restart.json (only when what it measured holds), then
# gpu-restart.py draws it. Needs what the E2E suite needs: root, gcc, Go and
# Debian's Jupyter stack on /usr/bin/python3 (docs/testing.md#what-the-tests-need).
set -eu
cd "$(dirname "$0")/../.."
# go-nvml's cgo otherwise warns about functions nvml.h marks deprecated.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
# Absolute: go test runs the test in the package's directory.
TFGPU_FIGURE_OUT="$PWD/docs/img" go test -tags e2e ./cmd/tfgpu-kernel -run '^TestE2EFigureGPURestart$' -count=1
python3 docs/img/gpu-restart.py docs/img/gpu-restart.json docs/img/gpu-restart.svg
