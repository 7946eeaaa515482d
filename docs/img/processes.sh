#!/bin/sh
# Redraws docs/img/processes.svg, docs/design.md's picture of one kernel's
# processes (docs/design.md#processes), from a fresh capture:
# TestE2EFigureProcesses runs a real kernel with its spare, before and after
# a Restart, and writes docs/img/processes.json (only when what it captured
# is what the picture shows), then processes.py draws it. Needs what the E2E
# suite needs (docs/testing.md#what-the-tests-need), as root: the picture is
# of root's `tfgpu-kernel ps --json`.
set -eu
cd "$(dirname "$0")/../.."
# go-nvml's cgo otherwise warns about functions nvml.h marks deprecated.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
# Absolute: go test runs the test in the package's directory.
TFGPU_FIGURE_OUT="$PWD/docs/img" go test -tags e2e ./cmd/tfgpu-kernel -run '^TestE2EFigureProcesses$' -count=1
python3 docs/img/processes.py docs/img/processes.json docs/img/processes.svg
