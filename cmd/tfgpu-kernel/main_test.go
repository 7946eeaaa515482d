package main

import (
	"os"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// With TFGPU_TEST_AS_COMMAND=1 the test binary is the tfgpu-kernel command
// (its arguments after the program name): the real-GPU check carries one
// binary that is both the test and the supervisor under test.
func TestMain(m *testing.M) {
	if run, args, ok := hiddenRole(os.Args); ok { // a supervisor run by this binary starts its watcher and standby with it
		os.Exit(run(args))
	}
	if os.Getenv("TFGPU_TEST_AS_COMMAND") == "1" {
		os.Unsetenv("TFGPU_TEST_AS_COMMAND")
		os.Args = append([]string{"tfgpu-kernel"}, os.Args[1:]...)
		main()
		return
	}
	// Nothing installed on the host may change an outcome: no kernelspec
	// or Jupyter config of the machine's, and no NVIDIA driver, but where
	// the real-GPU check runs on purpose (docs/testing.md#hermetic).
	var nvml []string
	if os.Getenv("TFGPU_REAL_GPU") == "" {
		nvml = testutil.HostNVML()
	}
	testutil.Hermetic(testutil.HostJupyterDirs(), nvml)
	code := m.Run()
	if testBinaryDir != "" {
		os.RemoveAll(testBinaryDir)
	}
	os.Exit(code)
}
