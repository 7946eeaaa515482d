package main

import (
	"os"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/wrapper"
)

// With TFGPU_TEST_AS_COMMAND=1 the test binary is the tfgpu-kernel command
// (its arguments after the program name): the real-GPU check carries one
// binary that is both the test and the supervisor under test.
func TestMain(m *testing.M) {
	if wrapper.IsWatcher() { // a supervisor run by this binary starts its watcher with it
		os.Exit(wrapper.Watch(os.Stdin, os.Stderr))
	}
	if os.Getenv("TFGPU_TEST_AS_COMMAND") == "1" {
		os.Unsetenv("TFGPU_TEST_AS_COMMAND")
		os.Args = append([]string{"tfgpu-kernel"}, os.Args[1:]...)
		main()
		return
	}
	os.Exit(m.Run())
}
