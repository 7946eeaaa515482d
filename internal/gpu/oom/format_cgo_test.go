//go:build cgo

package oom

import (
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
)

// formatBytes stands in for gpu.FormatBytes, which this package cannot
// import without linking NVML (cgo) in. Where cgo is, hold the two equal.
func TestFormatBytesIsGPUs(t *testing.T) {
	for _, n := range []int64{-1, 0, 1, 1023, 1024, 1536, 312 << 20, 80 << 30, 79<<30 + 648<<20, 1<<63 - 1} {
		if got, want := formatBytes(n), gpu.FormatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, gpu.FormatBytes says %q", n, got, want)
		}
	}
}
