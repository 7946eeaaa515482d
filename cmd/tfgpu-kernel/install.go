package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/kernelspec"
)

const installUsage = `usage: tfgpu-kernel install [--user | --sys-prefix | --prefix DIR] [flags] [run flags]
       tfgpu-kernel install --wrap KERNELSPEC [flags] [run flags]
       tfgpu-kernel install --uninstall [--name NAME | --wrap KERNELSPEC] [--user | --sys-prefix | --prefix DIR]

Write the Jupyter kernelspec that runs ipykernel under tfgpu-kernel, so
"Restart Kernel" really gives the GPU back. The kernelspec refers to this
binary by its absolute path.

With --wrap, write a new kernelspec that runs an existing one (e.g. a conda
env's kernel) under tfgpu-kernel: its argv unchanged (but a bare "python",
which Jupyter would run as its own Python, is the --python one), its env,
language, interrupt_mode, metadata and logos kept; named "<KERNELSPEC>-tfgpu" and shown
as "<its display name> (clean restart)" unless --name / --display-name say
otherwise. KERNELSPEC is a name as 'jupyter kernelspec list' shows it (found
through the jupyter_client of --python, or of the default Python), or a
directory holding kernel.json. The wrapped kernelspec is never modified.

Examples:
  tfgpu-kernel install --python /usr/bin/python3 --env CUDA_VISIBLE_DEVICES=0
  jupyter console --kernel tfgpu

  tfgpu-kernel install --wrap condaenv --memory-limit 16G
  jupyter console --kernel condaenv-tfgpu

  tfgpu-kernel install --wrap /opt/conda/envs/tf/share/jupyter/kernels/python3 --name tf-conda
  tfgpu-kernel install --uninstall --wrap condaenv      # removes condaenv-tfgpu only

flags:
`

// installRunFlagsHeader introduces the run flags in --help.
const installRunFlagsHeader = `
run flags (written into the kernelspec's argv only when given, checked as
'tfgpu-kernel run' checks them; defaults are run's):
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
	fs.StringVar(&o.Name, "name", kernelspec.DefaultName, "kernelspec `name` (letters, digits, . _ -; with --wrap the default is KERNELSPEC-tfgpu)")
	fs.StringVar(&o.DisplayName, "display-name", kernelspec.DefaultDisplayName, "`name` shown in Jupyter's kernel list (with --wrap the default is \"<theirs> (clean restart)\")")
	fs.StringVar(&o.Python, "python", "", "`PY` to run ipykernel with (default: first of python3 on PATH, /usr/bin/python3 that imports ipykernel); with --wrap, the Python whose jupyter_client finds KERNELSPEC")
	fs.StringVar(&o.Wrap, "wrap", "", "wrap the existing `KERNELSPEC` (a name, or a directory with kernel.json) instead of writing an ipykernel one")
	fs.Var(env, "env", "`K=V` set in the kernel's environment (repeatable; with --wrap, overrides theirs)")
	fs.BoolVar(&o.Replace, "replace", false, "overwrite an existing kernelspec of the same name")
	uninstall := fs.Bool("uninstall", false, "remove the kernelspec (only one written by tfgpu-kernel; with --wrap, only the wrapper)")
	var rf runFlags
	rf.define(fs)
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
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if _, err := rf.check(); err != nil {
		return installFail(stderr, 2, err)
	}
	flags, err := installRunArgv(fs, set)
	if err != nil {
		return installFail(stderr, 2, err)
	}
	o.RunFlags = flags
	if set["wrap"] && o.Wrap == "" {
		return installFail(stderr, 2, errors.New("--wrap needs a kernelspec name or directory"))
	}
	if o.Wrap != "" { // their names are the defaults, not ours
		if !set["name"] {
			o.Name = ""
		}
		if !set["display-name"] {
			o.DisplayName = ""
		}
	}
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
	if w := res.Wrapped; w != nil {
		fmt.Fprintf(stdout, "installed kernelspec %q (%q) in %s; it runs kernelspec %q from %s under tfgpu-kernel\n",
			filepath.Base(res.Dir), res.DisplayName, res.Dir, w.Name, w.Dir)
		return 0
	}
	fmt.Fprintf(stdout, "installed kernelspec %q (%q) in %s; python %s (ipykernel %s)\n",
		filepath.Base(res.Dir), res.DisplayName, res.Dir, res.Python.Executable, res.Python.IPykernel)
	return 0
}

// installRunArgv turns the run flags given on the command line (and not
// empty) into "--flag value" pairs in kernelspecRunFlags order, values as
// the flag package prints them. A relative --nvml-library path is made
// absolute: Jupyter starts the kernel from another directory.
func installRunArgv(fs *flag.FlagSet, set map[string]bool) ([]string, error) {
	var argv []string
	for _, name := range kernelspecRunFlags {
		if !set[name] {
			continue
		}
		v := fs.Lookup(name).Value.String()
		if v == "" {
			continue // an empty value means run's default
		}
		if name == "nvml-library" && strings.ContainsRune(v, os.PathSeparator) && !filepath.IsAbs(v) {
			abs, err := filepath.Abs(v)
			if err != nil {
				return nil, fmt.Errorf("--nvml-library %q: %w", v, err)
			}
			v = abs
		}
		argv = append(argv, "--"+name, v)
	}
	return argv, nil
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

// printInstallUsage writes usage and fs's flags GNU-style (--name), as
// users type them: install's own, then the run flags.
func printInstallUsage(w io.Writer, usage string, fs *flag.FlagSet) {
	fmt.Fprint(w, usage)
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(kernelspecRunFlags, f.Name) {
			printInstallFlag(w, f)
		}
	})
	fmt.Fprint(w, installRunFlagsHeader)
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(kernelspecRunFlags, f.Name) {
			printInstallFlag(w, f)
		}
	})
}

func printInstallFlag(w io.Writer, f *flag.Flag) {
	arg, help := flag.UnquoteUsage(f)
	if arg != "" {
		arg = " " + arg
	}
	def := ""
	if f.DefValue != "" && f.DefValue != "false" {
		def = fmt.Sprintf(" (default %q)", f.DefValue)
	}
	fmt.Fprintf(w, "  --%s%s\n        %s%s\n", f.Name, arg, help, def)
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
