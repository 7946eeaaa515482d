//go:build e2e

package place

import (
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The full suite explores the fuzz targets beyond their seeds.
func TestFuzzExplore(t *testing.T) {
	testutil.ExploreFuzz(t, "FuzzParse")
}
