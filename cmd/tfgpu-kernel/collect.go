package main

import (
	"flag"
	"os"
)

// stateDirNamed reports whether the state directory was named, with the
// command's --state-dir or TFGPU_STATE_DIR: then that directory alone is
// read.
func stateDirNamed(fs *flag.FlagSet) bool {
	named := os.Getenv("TFGPU_STATE_DIR") != ""
	fs.Visit(func(f *flag.Flag) { named = named || f.Name == "state-dir" })
	return named
}
