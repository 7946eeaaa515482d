package main

import (
	"flag"
	"os"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// collectStates is record.Collect: the records in dir, those of the
// caller's running supervisors wherever they record, and for root every
// user's. only: the records in dir alone (a state directory named with
// --state-dir or TFGPU_STATE_DIR).
func collectStates(dir string, allUsers, only bool) ([]record.State, []error, error) {
	if only {
		return record.ReadStates(dir)
	}
	return record.Collect(dir, allUsers)
}

// stateDirNamed reports whether the state directory was named, with the
// command's --state-dir or TFGPU_STATE_DIR: then that directory alone is
// read.
func stateDirNamed(fs *flag.FlagSet) bool {
	named := os.Getenv("TFGPU_STATE_DIR") != ""
	fs.Visit(func(f *flag.Flag) { named = named || f.Name == "state-dir" })
	return named
}
