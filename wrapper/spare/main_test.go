package spare

import (
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The spares the tests start become real ipykernels, which read the
// host's IPython profile (its startup files, ipython_kernel_config.py)
// and Jupyter config, and write root's IPython history: hidden
// (docs/testing.md#hermetic, TestHostIPythonUnseen).
func TestMain(m *testing.M) { testutil.MainHermetic(m) }
