package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// envName is the environment variable that stands in for a flag:
// --log-level ↔ TFGPU_LOG_LEVEL. A kernelspec's env or the Jupyter server's
// environment can then set any run flag.
func envName(flagName string) string {
	return "TFGPU_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its TFGPU_ variable. It prints one line and returns
// exit code 2 on a usage error, 0 (with done) after --help.
func parseFlags(fs *flag.FlagSet, args []string, example string) (code int, done bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, example)
			return 0, true
		}
		fmt.Fprintf(os.Stderr, "tfgpu-kernel %s: %v (see 'tfgpu-kernel %s --help')\n", fs.Name(), err, fs.Name())
		return 2, true
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var bad error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || bad != nil {
			return
		}
		// An empty variable is an unset one (TFGPU_STATE_DIR= in a shell
		// or a kernelspec clears it; it does not ask for "").
		if v := os.Getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				bad = fmt.Errorf("%s=%q: %v", envName(f.Name), v, err)
			}
		}
	})
	if bad != nil {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel %s: %v\n", fs.Name(), bad)
		return 2, true
	}
	return 0, false
}

func printUsage(fs *flag.FlagSet, example string) {
	w := os.Stderr
	fmt.Fprintf(w, "usage: tfgpu-kernel %s [flags]\n\n", fs.Name())
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, "\nEvery flag can also be set with TFGPU_<FLAG> (e.g. --log-level ↔ TFGPU_LOG_LEVEL).\n")
	if example != "" {
		fmt.Fprintf(w, "\nexample:\n  %s\n", example)
	}
}
