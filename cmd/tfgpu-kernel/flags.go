package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tfgpu/tfgpu-kernel/internal/runflags"
)

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its TFGPU_ variable. It prints one line and returns
// exit code 2 on a usage error, 0 (with done) after --help.
func parseFlags(fs *flag.FlagSet, args []string, example string) (src runflags.Source, code int, done bool) {
	src, help, err := runflags.Parse(fs, args)
	switch {
	case help:
		runflags.PrintUsage(os.Stdout, fs, example)
		return nil, 0, true
	case err != nil:
		fmt.Fprintf(os.Stderr, "tfgpu-kernel %s: %s\n", fs.Name(), runflags.UsageLine(fs.Name(), err))
		return nil, 2, true
	}
	return src, 0, false
}

// stateDirNamed reports whether the state directory was named, with the
// command's --state-dir or TFGPU_STATE_DIR: then that directory alone is
// read.
func stateDirNamed(fs *flag.FlagSet) bool {
	named := os.Getenv("TFGPU_STATE_DIR") != ""
	fs.Visit(func(f *flag.Flag) { named = named || f.Name == "state-dir" })
	return named
}
