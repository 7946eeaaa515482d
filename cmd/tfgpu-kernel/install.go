package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/kernelspec"
)

const installUsage = `usage: tfgpu-kernel install [--user | --sys-prefix | --prefix DIR] [flags]

Write the Jupyter kernelspec that runs ipykernel under tfgpu-kernel, so
"Restart Kernel" really gives the GPU back. The kernelspec refers to this
binary by its absolute path.

Example:
  tfgpu-kernel install --python /usr/bin/python3 --env CUDA_VISIBLE_DEVICES=0
  jupyter console --kernel tfgpu

flags:
`

// installEnvFlags collects repeatable --env K=V.
type installEnvFlags map[string]string

func (e installEnvFlags) String() string { return "" }
func (e installEnvFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	e[k] = v
	return nil
}

func cmdInstall(args []string) int {
	return installMain(args, os.Stdout, os.Stderr)
}

func installMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported as one line below
	env := installEnvFlags{}
	o := kernelspec.Options{Env: env, Version: version}
	user := fs.Bool("user", false, "install for the current user (default; honours JUPYTER_DATA_DIR)")
	sysPrefix := fs.Bool("sys-prefix", false, "install into the chosen Python's sys.prefix (virtualenv, conda env)")
	fs.StringVar(&o.Prefix, "prefix", "", "install into `DIR`/share/jupyter/kernels")
	fs.StringVar(&o.Name, "name", kernelspec.DefaultName, "kernelspec `name` (letters, digits, . _ -)")
	fs.StringVar(&o.DisplayName, "display-name", kernelspec.DefaultDisplayName, "`name` shown in Jupyter's kernel list")
	fs.StringVar(&o.Python, "python", "", "`PY` to run ipykernel with (default: first of python3 on PATH, /usr/bin/python3 that imports ipykernel)")
	fs.Var(env, "env", "`K=V` set in the kernel's environment (repeatable)")
	fs.BoolVar(&o.Replace, "replace", false, "overwrite an existing kernelspec of the same name")
	uninstall := fs.Bool("uninstall", false, "remove the kernelspec (only one written by tfgpu-kernel)")
	memLimit := fs.String("memory-limit", "", "`SIZE` the kernel's whole tree may use, e.g. 8G (passed to 'run --memory-limit')")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printInstallUsage(stdout, installUsage, fs)
			return 0
		}
		return installFail(stderr, 2, err)
	}
	if fs.NArg() > 0 {
		return installFail(stderr, 2, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if *memLimit != "" {
		if n, err := cgroup.ParseSize(*memLimit); err != nil || n <= 0 {
			return installFail(stderr, 2, fmt.Errorf("--memory-limit %q: want a size such as 8G or 300M", *memLimit))
		}
		o.RunFlags = append(o.RunFlags, "--memory-limit", *memLimit)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case installCountTrue(*user, *sysPrefix, set["prefix"]) > 1:
		return installFail(stderr, 2, errors.New("--user, --sys-prefix and --prefix are mutually exclusive"))
	case set["prefix"] && o.Prefix == "":
		return installFail(stderr, 2, errors.New("--prefix needs a directory"))
	case *sysPrefix:
		o.Dest = kernelspec.SysPrefix
	case set["prefix"]:
		o.Dest = kernelspec.Prefix
	}

	if *uninstall {
		dir, err := kernelspec.Uninstall(o)
		if err != nil {
			return installFail(stderr, installExitCode(err), err)
		}
		fmt.Fprintf(stdout, "removed kernelspec %q from %s\n", filepath.Base(dir), dir)
		return 0
	}
	bin, err := installSelfPath()
	if err != nil {
		return installFail(stderr, 1, err)
	}
	o.Binary = bin
	res, err := kernelspec.Install(o)
	if err != nil {
		return installFail(stderr, installExitCode(err), err)
	}
	fmt.Fprintf(stdout, "installed kernelspec %q (%q) in %s; python %s (ipykernel %s)\n",
		filepath.Base(res.Dir), installDisplayName(o), res.Dir, res.Python.Executable, res.Python.IPykernel)
	return 0
}

// selfPath is the running binary, symlinks resolved, so the kernelspec keeps
// working when a symlink (e.g. in ~/.local/bin) is moved.
func installSelfPath() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	return filepath.Abs(p)
}

func installDisplayName(o kernelspec.Options) string {
	if o.DisplayName == "" {
		return kernelspec.DefaultDisplayName
	}
	return o.DisplayName
}

func installExitCode(err error) int {
	if errors.Is(err, kernelspec.ErrInvalid) {
		return 2
	}
	return 1
}

func installFail(w io.Writer, code int, err error) int {
	fmt.Fprintf(w, "tfgpu-kernel install: %v\n", err)
	return code
}

// printInstallUsage writes usage and fs's flags GNU-style (--name), as users type them.
func printInstallUsage(w io.Writer, usage string, fs *flag.FlagSet) {
	fmt.Fprint(w, usage)
	fs.VisitAll(func(f *flag.Flag) {
		arg, help := flag.UnquoteUsage(f)
		if arg != "" {
			arg = " " + arg
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "  --%s%s\n        %s%s\n", f.Name, arg, help, def)
	})
}

func installCountTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
