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

	"github.com/tfgpu/tfgpu-kernel/internal/control"
	"github.com/tfgpu/tfgpu-kernel/internal/runflags"
	"github.com/tfgpu/tfgpu-kernel/kernelspec"
)

const installUsage = `usage: tfgpu-kernel install [--user | --system | --sys-prefix | --prefix DIR] [flags] [run flags]
       tfgpu-kernel install --wrap KERNELSPEC [flags] [run flags]
       tfgpu-kernel install --uninstall [--name NAME | --wrap KERNELSPEC] [--with-wraps] [--user | --system | --sys-prefix | --prefix DIR]

Write the Jupyter kernelspec that runs ipykernel under tfgpu-kernel, so
"Restart Kernel" really gives the GPU back. The kernelspec refers to this
binary by its absolute path.

Installing over a kernelspec of ours (--replace) is an upgrade: what it
was configured with (the Python, run flags, --env, display name, what it
wraps) is kept unless given again; a run flag given empty (--memory-limit
"") drops it; --reset starts from the defaults.

With --wrap, write a new kernelspec that runs an existing one (e.g. a conda
env's kernel) under tfgpu-kernel: its argv unchanged (but a bare "python",
which Jupyter would run as its own Python, is the --python one), its env,
language, interrupt_mode, metadata and logos kept; named "<KERNELSPEC>-tfgpu" and shown
as "<its display name> (clean restart)" unless --name / --display-name say
otherwise. KERNELSPEC is a name as 'jupyter kernelspec list' shows it (found
through the jupyter_client of --python, or of the default Python), or a
directory holding kernel.json. The wrapped kernelspec is never modified.

Examples:
  tfgpu-kernel install --python ~/venvs/tf/bin/python3 --env CUDA_VISIBLE_DEVICES=0
  jupyter console --kernel tfgpu

  sudo tfgpu-kernel install --system --gpu-memory-limit 40G   # every user's Jupyter lists it

  tfgpu-kernel install --wrap condaenv --memory-limit 16G
  jupyter console --kernel condaenv-tfgpu

  tfgpu-kernel install --uninstall --wrap condaenv      # removes condaenv-tfgpu only
  tfgpu-kernel install --uninstall --with-wraps         # tfgpu and every twin that runs this binary

flags:
`

// installRunFlagsHeader introduces the run flags in --help.
const installRunFlagsHeader = `
run flags (written into the kernelspec's argv, checked as 'tfgpu-kernel run'
checks them; defaults are run's; --env TFGPU_<FLAG>=V is checked the same way):
`

// Exit codes of install besides 0, 1 and 2 (docs/design.md#install).
const (
	// installExitNoPython: no Python imports ipykernel, and Debian's
	// packages for /usr/bin/python3 would give one (install.sh then
	// installs them with apt-get when it runs as root).
	installExitNoPython = 3
)

// installEnvFlags collects repeatable --env K=V.
type installEnvFlags map[string]string

func (e installEnvFlags) String() string { return "" }
func (e installEnvFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want NAME=VALUE, such as CUDA_VISIBLE_DEVICES=0")
	}
	e[k] = v
	return nil
}

func cmdInstall(args []string) int {
	return installMain(args, os.Stdout, os.Stderr)
}

func installMain(args []string, stdout, stderr io.Writer) int {
	env, src, set := installEnvFlags{}, runflags.Source{}, map[string]bool{}
	var rf runflags.Flags
	var display string // o.DisplayName as given
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	c := &kernelspec.Command{Out: stdout, Running: control.RunningOn, Failed: func(err error) { installFail(stderr, 1, err) }}
	o := &c.Options
	fs.SetOutput(io.Discard) // errors are reported as one line below
	o.Env, o.Version = env, version
	fs.BoolVar(&c.UserGiven, "user", false, "install for the current user (default; honours JUPYTER_DATA_DIR)")
	system := fs.Bool("system", false, "install for every user of this machine, in "+filepath.Join(kernelspec.SystemDataDir, "kernels")+" (root; the binary and the Python must be root's)")
	sysPrefix := fs.Bool("sys-prefix", false, "install into the chosen Python's sys.prefix (virtualenv, conda env)")
	fs.StringVar(&o.Prefix, "prefix", "", "install into `DIR`/share/jupyter/kernels")
	fs.StringVar(&o.Name, "name", kernelspec.DefaultName, "kernelspec `NAME` (letters, digits, . _ -; with --wrap the default is KERNELSPEC-tfgpu)")
	fs.StringVar(&display, "display-name", "", "`NAME` shown in Jupyter's kernel list (default \""+kernelspec.DefaultDisplayName+"\"; with --wrap \"<theirs> (clean restart)\")")
	fs.StringVar(&o.Python, "python", "", "`PY` to run ipykernel with (default: the installed kernelspec's on an upgrade, else the first of python3 on PATH, /usr/bin/python3 that imports ipykernel); with --wrap, the Python whose jupyter_client finds KERNELSPEC")
	fs.StringVar(&o.Wrap, "wrap", "", "wrap the existing `KERNELSPEC` (a name, or a directory with kernel.json) instead of writing an ipykernel one")
	fs.Var(env, "env", "`NAME=VALUE` set in the kernel's environment (repeatable; with --wrap, overrides theirs)")
	fs.BoolVar(&o.Replace, "replace", false, "install over an existing kernelspec of the same name, keeping what it was configured with")
	fs.BoolVar(&c.Reset, "reset", false, "with --replace: keep nothing of the installed kernelspec")
	fs.BoolVar(&c.DryRun, "dry-run", false, "say what would be installed and kept; write nothing")
	uninstall := fs.Bool("uninstall", false, "remove the kernelspec (only one written by tfgpu-kernel; with --wrap, only the wrapper) and say which kernels still run on it, and which other kernelspecs run this binary")
	fs.BoolVar(&c.WithWraps, "with-wraps", false, "with --uninstall: also remove every other kernelspec of ours that runs this binary (its --wrap twins), wherever Jupyter finds them")
	rf.Define(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printInstallUsage(stdout, installUsage, fs)
			return 0
		}
		return installFail(stderr, 2, errors.New(runflags.FlagError(err)))
	}
	if fs.NArg() > 0 {
		return installFail(stderr, 2, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["wrap"] && o.Wrap == "" {
		return installFail(stderr, 2, errors.New("--wrap needs a kernelspec name or directory"))
	}
	if !set["name"] && o.Wrap != "" {
		o.Name = "" // theirs is the default, not ours
	}
	o.DisplayName = display
	switch {
	case installCountTrue(c.UserGiven, *system, *sysPrefix, set["prefix"]) > 1:
		return installFail(stderr, 2, errors.New("--user, --system, --sys-prefix and --prefix are mutually exclusive"))
	case set["prefix"] && o.Prefix == "":
		return installFail(stderr, 2, errors.New("--prefix needs a directory"))
	case c.Reset && !o.Replace:
		return installFail(stderr, 2, errors.New("--reset goes with --replace"))
	case c.WithWraps && !*uninstall:
		return installFail(stderr, 2, errors.New("--with-wraps goes with --uninstall"))
	case c.WithWraps && o.Wrap != "":
		return installFail(stderr, 2, errors.New("--with-wraps removes every twin with the main kernelspec; --wrap removes one twin: give one of them"))
	case *sysPrefix:
		o.Dest = kernelspec.SysPrefix
	case *system:
		o.Dest = kernelspec.System
	case set["prefix"]:
		o.Dest = kernelspec.Prefix
	}
	c.Given = kernelspec.Upgrade{Set: set, Src: src, Env: env, RunFlags: runflags.KernelspecFlags, EnvName: runflags.EnvName, Flags: fs,
		Check: func() error {
			if _, err := rf.Check(src); err != nil {
				return err
			}
			return runflags.CheckKernelspecEnv(env, func(name string) bool { return set[name] && src[name] == "" })
		}}
	do := c.Install
	if *uninstall {
		do = c.Uninstall
	}
	switch err := do(); {
	case errors.Is(err, kernelspec.ErrTwinsLeft):
		return 1 // each said by Failed
	case err != nil:
		return installFail(stderr, installExitCode(err), err)
	}
	return 0
}

func installExitCode(err error) int {
	var np *kernelspec.NoPythonError
	switch {
	case errors.Is(err, kernelspec.ErrInvalid):
		return 2
	case errors.As(err, &np) && np.Apt:
		return installExitNoPython
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
	isRun := func(f *flag.Flag) bool { return slices.Contains(runflags.KernelspecFlags, f.Name) }
	runflags.PrintFlags(w, fs, func(f *flag.Flag) bool { return !isRun(f) })
	fmt.Fprint(w, installRunFlagsHeader)
	runflags.PrintFlags(w, fs, isRun)
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
