package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// supervisorKernelID is the kernel id a running supervisor serves, read
// from its command line by run's own flags (argv[0] is the program, argv[1]
// "run"), with a relative connection file taken from cwd as run takes it
// from its working directory; "" when argv is not a run that parses.
func supervisorKernelID(argv []string, cwd string) string {
	if len(argv) < 2 || argv[1] != "run" {
		return ""
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	conn := fs.String("f", "", "")
	var rf runFlags
	rf.define(fs)
	fs.String("state-dir", "", "")
	if fs.Parse(argv[2:]) != nil || *conn == "" {
		return ""
	}
	path := *conn
	if !filepath.IsAbs(path) {
		if !filepath.IsAbs(cwd) {
			return ""
		}
		path = filepath.Join(cwd, path)
	}
	return jmsg.KernelID(path)
}

// collectStates is record.Collect with run's way of naming kernels: the
// records in dir, the caller's running supervisors' wherever they record,
// and for root every user's. only: the records in dir alone (a state
// directory named with --state-dir or TFGPU_STATE_DIR).
func collectStates(dir string, allUsers, only bool) ([]record.State, []error, error) {
	if only {
		return record.ReadStates(dir)
	}
	return record.Collect(dir, allUsers, supervisorKernelID)
}

// stateDirNamed reports whether the state directory was named, with the
// command's --state-dir or TFGPU_STATE_DIR: then that directory alone is
// read.
func stateDirNamed(fs *flag.FlagSet) bool {
	named := os.Getenv("TFGPU_STATE_DIR") != ""
	fs.Visit(func(f *flag.Flag) { named = named || f.Name == "state-dir" })
	return named
}
