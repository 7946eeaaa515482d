package main

import (
	"fmt"
	"os"
	"runtime/debug"
)

// stamped is set at build time with -ldflags "-X main.stamped=..."
// (install.sh sets `git describe`). The linker sets only a variable
// initialised with a constant, so version, which calls a function, cannot
// be the one stamped: a plain `go build` in a checkout says "dev" and the
// commit the toolchain recorded.
var stamped = "dev"

var version = buildVersion(stamped, debug.ReadBuildInfo)

// buildVersion is v, or "dev (COMMIT[, modified])" from the build's VCS
// stamp when v is "dev".
func buildVersion(v string, info func() (*debug.BuildInfo, bool)) string {
	if v != "dev" {
		return v
	}
	bi, ok := info()
	if !ok {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev == "":
		return v
	case modified == "true":
		return v + " (" + rev + ", modified)"
	}
	return v + " (" + rev + ")"
}

type subcommand struct {
	name, summary string
	run           func(args []string) int
}

func subcommands() []subcommand {
	return []subcommand{
		{"run", "supervise a kernel (what the kernelspec's argv runs)", cmdRun},
		{"install", "install the \"TF-GPU (clean restart)\" kernelspec", cmdInstall},
		{"ps", "list supervised kernels, their processes and GPU memory", cmdPs},
		{"stop", "kill a kernel's whole tree (the kernel's place kept), even if its supervisor is hung or gone", cmdStop},
		{"start", "let kernels held down by stop --hold start again", cmdStart},
		{"doctor", "check containment, memory limits and stale kernels on this host", cmdDoctor},
		{"version", "print the version", func([]string) int { fmt.Println("tfgpu-kernel", version); return 0 }},
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: tfgpu-kernel COMMAND [flags]\n       tfgpu-kernel --version\n\ncommands:\n")
	for _, c := range subcommands() {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'tfgpu-kernel COMMAND --help' for a command's flags.\n")
}

// hiddenSubcommands are the roles a supervisor starts this program in
// itself, never typed by a user: with `run`, the one place where a
// process of a kernel learns which role it plays (docs/design.md#processes).
func hiddenSubcommands() []subcommand {
	return []subcommand{
		{"standby", "", cmdStandby},
		{"watch", "", cmdWatch},
	}
}

// hiddenRole is the role os.Args asks for, when it is a hidden one: also
// a watcher started by a supervisor of an earlier version, which named
// the role in its environment.
func hiddenRole(args []string) (func([]string) int, []string, bool) {
	if len(args) == 1 && os.Getenv("TFGPU_WATCHER") == "1" {
		return cmdWatch, []string{"?"}, true
	}
	if len(args) < 2 {
		return nil, nil, false
	}
	for _, c := range hiddenSubcommands() {
		if c.name == args[1] {
			return c.run, args[2:], true
		}
	}
	return nil, nil, false
}

func main() {
	if run, args, ok := hiddenRole(os.Args); ok {
		os.Exit(run(args))
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	switch name {
	case "-h", "--help", "help":
		usage()
		os.Exit(0)
	case "--version", "-V":
		fmt.Println("tfgpu-kernel", version)
		os.Exit(0)
	}
	for _, c := range subcommands() {
		if c.name == name {
			os.Exit(c.run(os.Args[2:]))
		}
	}
	fmt.Fprintf(os.Stderr, "tfgpu-kernel: unknown command %q (try 'tfgpu-kernel --help')\n", name)
	os.Exit(2)
}
