package kernelspec

import (
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Nothing installed on the host may change an outcome: the tests ask the
// real jupyter_client, which would find a system-wide kernelspec of the
// machine's (IRkernel's "ir", a "julia-1.10", root's "tfgpu") or one of
// JUPYTER_PATH's (docs/testing.md#hermetic, TestHostKernelspecsUnseen).
func TestMain(m *testing.M) { testutil.MainHermetic(m) }
