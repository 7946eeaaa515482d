package main

import (
	"fmt"
	"os"

	"github.com/tfgpu/tfgpu-kernel/wrapper"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type subcommand struct {
	name, summary string
	run           func(args []string) int
}

func subcommands() []subcommand {
	return []subcommand{
		{"run", "supervise a kernel (what the kernelspec's argv runs)", cmdRun},
		{"install", "install the \"TF-GPU (clean restart)\" kernelspec", cmdInstall},
		{"ps", "list supervised kernels, their processes and GPU memory", cmdPs},
		{"stop", "kill a kernel's whole tree, even if its supervisor is hung or gone", cmdStop},
		{"doctor", "check containment, memory limits and stale kernels on this host", cmdDoctor},
		{"version", "print the version", func([]string) int { fmt.Println("tfgpu-kernel", version); return 0 }},
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: tfgpu-kernel COMMAND [flags]\n\ncommands:\n")
	for _, c := range subcommands() {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'tfgpu-kernel COMMAND --help' for a command's flags.\n")
}

func main() {
	if wrapper.IsWatcher() { // started by `run` itself (see wrapper/watcher.go), never by a user
		os.Exit(wrapper.Watch(os.Stdin, os.Stderr))
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		usage()
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
