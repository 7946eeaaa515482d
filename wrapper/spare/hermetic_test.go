package spare

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// TestHostIPythonUnseen runs TestSpareBecomesTheKernel on a machine whose
// home has an IPython startup file, and whose environment names another
// IPython directory (IPYTHONDIR) with one: the kernel the spare becomes
// runs neither (TestMain's Hermetic), and the test passes. The control,
// told it is already hermetic so that nothing is hidden, runs the home's.
func TestHostIPythonUnseen(t *testing.T) {
	testutil.RequireHermetic(t)
	requirePython(t)
	tmp := t.TempDir()
	mark := filepath.Join(tmp, "ran")
	startup := `import os
with open(os.environ["SPARE_HOST_STARTUP_MARK"], "a") as f:
    f.write(__file__ + "\n")
`
	home, ipython := filepath.Join(tmp, "home"), filepath.Join(tmp, "ipython")
	for _, d := range []string{filepath.Join(home, ".ipython"), ipython} {
		dir := filepath.Join(d, "profile_default", "startup")
		testutil.NoErr(t, os.MkdirAll(dir, 0o755))
		testutil.NoErr(t, os.WriteFile(filepath.Join(dir, "00-host.py"), []byte(startup), 0o644))
	}
	host := testutil.Host{Env: []string{"HOME=" + home, "IPYTHONDIR=" + ipython, "SPARE_HOST_STARTUP_MARK=" + mark}}
	run := "-test.run=^TestSpareBecomesTheKernel$"

	out, err := host.Run(t, false, run, "-test.v", "-test.timeout=2m")
	b, rerr := os.ReadFile(mark)
	if rerr != nil || !strings.Contains(string(b), filepath.Join(home, ".ipython")) {
		t.Fatalf("control, the host not hidden: the home's IPython startup file did not run (%v, %q):\n%v\n%s", rerr, b, err, out)
	}
	testutil.NoErr(t, os.Remove(mark))

	out, err = host.Run(t, true, run, "-test.v", "-test.timeout=2m")
	if err != nil || !strings.Contains(out, "--- PASS: TestSpareBecomesTheKernel ") {
		t.Fatalf("TestSpareBecomesTheKernel on a host with IPython startup files: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(mark); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a startup file of the host's ran in the tests' kernel: %q, %v", b, err)
	}
}
