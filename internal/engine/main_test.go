package engine

import (
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Nothing of the host's may change an outcome: Slurm's variables (a test
// run inside srun or sbatch), XDG's and TFGPU_ ones of the shell that
// runs go test (docs/testing.md#hermetic).
func TestMain(m *testing.M) { testutil.MainClean(m) }
