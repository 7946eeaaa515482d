package control

import (
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The shell's TFGPU_STATE_DIR, XDG's and Slurm's variables must not change
// which kernels a test's stop or ps sees (docs/testing.md#hermetic).
func TestMain(m *testing.M) { testutil.MainClean(m) }
