package runflags

import (
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Nothing of the host's may change an outcome: the TFGPU_ variables of
// the shell that runs go test, Jupyter's, Slurm's (docs/testing.md#hermetic).
func TestMain(m *testing.M) { testutil.MainHermetic(m) }
