package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
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

// installCmd is one parsed `install` command line.
type installCmd struct {
	fs      *flag.FlagSet
	o       kernelspec.Options
	env     installEnvFlags
	rf      runflags.Flags
	set     map[string]bool
	src     runflags.Source // how each run flag was given, for errors
	dryRun  bool
	reset   bool
	wraps   bool // --with-wraps
	stdout  io.Writer
	display string // o.DisplayName as given
}

func installMain(args []string, stdout, stderr io.Writer) int {
	c := &installCmd{fs: flag.NewFlagSet("install", flag.ContinueOnError), env: installEnvFlags{}, stdout: stdout, src: runflags.Source{}}
	fs, o := c.fs, &c.o
	fs.SetOutput(io.Discard) // errors are reported as one line below
	o.Env, o.Version = c.env, version
	user := fs.Bool("user", false, "install for the current user (default; honours JUPYTER_DATA_DIR)")
	system := fs.Bool("system", false, "install for every user of this machine, in "+filepath.Join(kernelspec.SystemDataDir, "kernels")+" (root; the binary and the Python must be root's)")
	sysPrefix := fs.Bool("sys-prefix", false, "install into the chosen Python's sys.prefix (virtualenv, conda env)")
	fs.StringVar(&o.Prefix, "prefix", "", "install into `DIR`/share/jupyter/kernels")
	fs.StringVar(&o.Name, "name", kernelspec.DefaultName, "kernelspec `NAME` (letters, digits, . _ -; with --wrap the default is KERNELSPEC-tfgpu)")
	fs.StringVar(&c.display, "display-name", "", "`NAME` shown in Jupyter's kernel list (default \""+kernelspec.DefaultDisplayName+"\"; with --wrap \"<theirs> (clean restart)\")")
	fs.StringVar(&o.Python, "python", "", "`PY` to run ipykernel with (default: the installed kernelspec's on an upgrade, else the first of python3 on PATH, /usr/bin/python3 that imports ipykernel); with --wrap, the Python whose jupyter_client finds KERNELSPEC")
	fs.StringVar(&o.Wrap, "wrap", "", "wrap the existing `KERNELSPEC` (a name, or a directory with kernel.json) instead of writing an ipykernel one")
	fs.Var(c.env, "env", "`NAME=VALUE` set in the kernel's environment (repeatable; with --wrap, overrides theirs)")
	fs.BoolVar(&o.Replace, "replace", false, "install over an existing kernelspec of the same name, keeping what it was configured with")
	fs.BoolVar(&c.reset, "reset", false, "with --replace: keep nothing of the installed kernelspec")
	fs.BoolVar(&c.dryRun, "dry-run", false, "say what would be installed and kept; write nothing")
	uninstall := fs.Bool("uninstall", false, "remove the kernelspec (only one written by tfgpu-kernel; with --wrap, only the wrapper) and say which kernels still run on it, and which other kernelspecs run this binary")
	fs.BoolVar(&c.wraps, "with-wraps", false, "with --uninstall: also remove every other kernelspec of ours that runs this binary (its --wrap twins), wherever Jupyter finds them")
	c.rf.Define(fs)
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
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	if c.set["wrap"] && o.Wrap == "" {
		return installFail(stderr, 2, errors.New("--wrap needs a kernelspec name or directory"))
	}
	if !c.set["name"] && o.Wrap != "" {
		o.Name = "" // theirs is the default, not ours
	}
	o.DisplayName = c.display
	switch {
	case installCountTrue(*user, *system, *sysPrefix, c.set["prefix"]) > 1:
		return installFail(stderr, 2, errors.New("--user, --system, --sys-prefix and --prefix are mutually exclusive"))
	case c.set["prefix"] && o.Prefix == "":
		return installFail(stderr, 2, errors.New("--prefix needs a directory"))
	case c.reset && !o.Replace:
		return installFail(stderr, 2, errors.New("--reset goes with --replace"))
	case c.wraps && !*uninstall:
		return installFail(stderr, 2, errors.New("--with-wraps goes with --uninstall"))
	case c.wraps && o.Wrap != "":
		return installFail(stderr, 2, errors.New("--with-wraps removes every twin with the main kernelspec; --wrap removes one twin: give one of them"))
	case *sysPrefix:
		o.Dest = kernelspec.SysPrefix
	case *system:
		o.Dest = kernelspec.System
	case c.set["prefix"]:
		o.Dest = kernelspec.Prefix
	}
	if os.Geteuid() == 0 && o.Dest == kernelspec.User && !*user && !*uninstall {
		if err := c.rootWithoutDest(); err != nil {
			return installFail(stderr, 2, err)
		}
	}
	if *uninstall {
		return c.uninstall(stderr)
	}
	return c.install(stderr)
}

// rootWithoutDest refuses root's install that names no destination when a
// kernelspec of ours of the same name is there for every user: root's own
// (the default, --user) would hide it from root's Jupyter, and its
// settings with it (#34; install.sh refuses the same). Root says which.
func (c *installCmd) rootWithoutDest() error {
	sysOpts := c.o
	sysOpts.Dest = kernelspec.System
	sys, err := kernelspec.SpecDir(context.Background(), sysOpts)
	if err != nil {
		return nil // the install itself says what is wrong with the name
	}
	if p, err := kernelspec.ReadPrevious(sys); p == nil && (err == nil || errors.Is(err, kernelspec.ErrNotOurs)) {
		return nil
	}
	own, err := kernelspec.SpecDir(context.Background(), c.o)
	if err != nil {
		return nil
	}
	return fmt.Errorf("as root without --user or --system: %s is the kernelspec %q for every user, and root's own in %s would hide it (and its settings) from root's Jupyter; give --system to upgrade that one, or --user for root's own",
		sys, filepath.Base(sys), own)
}

// install writes the kernelspec, keeping what an installed one of ours
// was configured with (keep), after checking every setting as run would.
func (c *installCmd) install(stderr io.Writer) int {
	o := &c.o
	bin, err := installSelfPath()
	if err != nil {
		return installFail(stderr, 1, err)
	}
	o.Binary = bin
	if dir, err := kernelspec.SpecDir(context.Background(), *o); err == nil && kernelspec.IsLauncherSpec(dir) {
		return c.configureLauncher(stderr, dir)
	}
	kept, prev, code := c.settle(stderr)
	if code != 0 {
		return code
	}
	install := kernelspec.Install
	verb := "installed"
	if c.dryRun {
		install, verb = kernelspec.Plan, "would install"
	}
	res, err := install(*o)
	if err != nil {
		if prev != nil && prev.Python != "" && !c.set["python"] && errors.Is(err, kernelspec.ErrNoIPykernel) {
			err = fmt.Errorf("the installed kernelspec %s runs %w; or give another with --python", prev.Dir, err)
		}
		return installFail(stderr, installExitCode(err), err)
	}
	if len(kept) > 0 {
		fmt.Fprintf(c.stdout, "kept from the installed kernelspec: %s\n", strings.Join(kept, ", "))
	}
	if prev != nil && prev.Python != "" && res.Wrapped == nil && prev.Python != res.Python.Executable {
		fmt.Fprintf(c.stdout, "python changed: %s → %s\n", prev.Python, res.Python.Executable)
	}
	if w := res.Wrapped; w != nil {
		fmt.Fprintf(c.stdout, "%s kernelspec %q (%q) in %s; it runs kernelspec %q from %s under tfgpu-kernel\n",
			verb, filepath.Base(res.Dir), res.DisplayName, res.Dir, w.Name, w.Dir)
		return 0
	}
	fmt.Fprintf(c.stdout, "%s kernelspec %q (%q) in %s; python %s (ipykernel %s)\n",
		verb, filepath.Base(res.Dir), res.DisplayName, res.Dir, res.Python.Executable, res.Python.IPykernel)
	return 0
}

// keep fills in what was not given on the command line from the
// installed kernelspec of ours that --replace upgrades (not with --reset):
// kernelspec.Keep, with run's rules for the run flags.
func (c *installCmd) keep() (kept []string, prev *kernelspec.Previous, err error) {
	if !c.o.Replace || c.reset {
		return nil, nil, nil
	}
	return kernelspec.Keep(context.Background(), &c.o, kernelspec.Upgrade{Set: c.set, Src: c.src, Env: c.env,
		RunFlags: runflags.KernelspecFlags, EnvName: runflags.EnvName, SetFlag: c.fs.Set})
}

// settle fills in what is kept from the installed kernelspec (keep),
// checks every setting as run will, and puts the run flags into o.RunFlags;
// code is install's exit code when something is refused (said on stderr).
func (c *installCmd) settle(stderr io.Writer) (kept []string, prev *kernelspec.Previous, code int) {
	kept, prev, err := c.keep()
	if err != nil {
		return nil, nil, installFail(stderr, installExitCode(err), err)
	}
	if _, err := c.rf.Check(c.src); err != nil {
		return nil, nil, installFail(stderr, 2, err)
	}
	if err := runflags.CheckKernelspecEnv(c.env, func(name string) bool { return c.set[name] && c.src[name] == "" }); err != nil {
		return nil, nil, installFail(stderr, 2, err)
	}
	if c.o.RunFlags, err = installRunArgv(c.fs, c.set); err != nil {
		return nil, nil, installFail(stderr, 2, err)
	}
	return kept, prev, 0
}

// configureLauncher configures the wheel's kernelspec in dir, which is
// pip's: its settings (run flags, --env) go into its settings file,
// PREFIX/etc/jupyter/tfgpu-kernel.json, which pip upgrades keep; what the
// file held is kept unless given again, as an upgrade keeps a kernelspec's
// (docs/design.md#the-wheel).
func (c *installCmd) configureLauncher(stderr io.Writer, dir string) int {
	o := &c.o
	switch {
	case o.Wrap != "":
		return installFail(stderr, 2, fmt.Errorf("%s is the tfgpu-kernel wheel's kernelspec, not one to wrap into; give --name for the twin", dir))
	case c.set["display-name"]:
		return installFail(stderr, 2, fmt.Errorf("%s is the tfgpu-kernel wheel's kernelspec: pip writes its kernel.json, display name included; for another name install a kernelspec of your own with --name NAME", dir))
	}
	o.Replace = true // its settings file, read back as a kernelspec's
	kept, _, code := c.settle(stderr)
	if code != 0 {
		return code
	}
	path := kernelspec.SettingsPath(dir)
	if err := rootMayWriteSettings(path); err != nil {
		return installFail(stderr, 1, err)
	}
	set := kernelspec.Settings{RunFlags: o.RunFlags, Env: c.env}
	var words []string
	for _, k := range slices.Sorted(maps.Keys(c.env)) {
		words = append(words, "--env "+k+"="+c.env[k])
	}
	what := strings.Join(append(slices.Clone(o.RunFlags), words...), " ")
	if what == "" {
		what = "none (the defaults)"
	}
	if len(kept) > 0 {
		fmt.Fprintf(c.stdout, "kept from %s: %s\n", path, strings.Join(kept, ", "))
	}
	if c.dryRun {
		fmt.Fprintf(c.stdout, "would configure kernelspec %q in %s (the tfgpu-kernel wheel's) in %s: %s\n", filepath.Base(dir), dir, path, what)
		return 0
	}
	if err := kernelspec.WriteSettings(path, set); err != nil {
		return installFail(stderr, 1, err)
	}
	fmt.Fprintf(c.stdout, "configured kernelspec %q in %s (the tfgpu-kernel wheel's; pip upgrades keep its settings) in %s: %s\n", filepath.Base(dir), dir, path, what)
	return 0
}

// uninstall removes the kernelspec and says which kernels still run on
// it. Removing the main kernelspec (not a --wrap twin), it names the other
// kernelspecs of ours that run this binary: they stop working when the
// binary goes, as install.sh --uninstall removes it next (#34), and
// --with-wraps removes them too.
func (c *installCmd) uninstall(stderr io.Writer) int {
	dir, err := kernelspec.SpecDir(context.Background(), c.o)
	if err != nil {
		return installFail(stderr, installExitCode(err), err)
	}
	prev, prevErr := kernelspec.ReadPrevious(dir)
	if prev != nil && prev.Launcher {
		return c.unconfigureLauncher(stderr, dir)
	}
	var bin string
	var others []kernelspec.Spec
	if c.o.Wrap == "" {
		if bin, err = installSelfPath(); err != nil {
			return installFail(stderr, 1, err)
		}
		others = kernelspec.Twins(context.Background(), bin, dir, prev)
	}
	if c.dryRun {
		switch {
		case prevErr != nil:
			return installFail(stderr, 1, fmt.Errorf("would remove nothing: %v", prevErr))
		case prev == nil && !(c.wraps && len(others) > 0):
			return installFail(stderr, 1, fmt.Errorf("would remove nothing: no kernelspec at %s", dir))
		case prev != nil:
			fmt.Fprintf(c.stdout, "would remove kernelspec %q from %s\n", filepath.Base(dir), dir)
		}
		if !c.wraps {
			c.nameOthers(bin, others)
			return 0
		}
		for _, sp := range others {
			fmt.Fprintf(c.stdout, "would remove kernelspec %q from %s (it runs %s too)\n", sp.Name, sp.Dir, bin)
		}
		return 0
	}
	switch dir, err = kernelspec.Uninstall(c.o); {
	case err == nil:
		fmt.Fprintf(c.stdout, "removed kernelspec %q from %s\n", filepath.Base(dir), dir)
		sayRunning(c.stdout, prev)
	case c.wraps && errors.Is(err, fs.ErrNotExist) && len(others) > 0:
		fmt.Fprintf(c.stdout, "no kernelspec %q at %s\n", filepath.Base(dir), dir) // gone already: its twins still go
	default:
		return installFail(stderr, installExitCode(err), err)
	}
	if !c.wraps {
		c.nameOthers(bin, others)
		return 0
	}
	code := 0
	for _, sp := range others {
		p, _ := kernelspec.ReadPrevious(sp.Dir)
		if err := kernelspec.UninstallDir(sp.Dir); err != nil {
			installFail(stderr, 1, err)
			code = 1
			continue
		}
		fmt.Fprintf(c.stdout, "removed kernelspec %q from %s (it ran %s too)\n", sp.Name, sp.Dir, bin)
		sayRunning(c.stdout, p)
	}
	return code
}

// nameOthers says, in one line, which other kernelspecs run bin.
func (c *installCmd) nameOthers(bin string, others []kernelspec.Spec) {
	if len(others) == 0 {
		return
	}
	names := make([]string, len(others))
	for i, sp := range others {
		names[i] = fmt.Sprintf("%q in %s", sp.Name, sp.Dir)
	}
	if len(others) == 1 {
		fmt.Fprintf(c.stdout, "kernelspec %s runs %s too and stays (--with-wraps removes it with this one)\n", names[0], bin)
		return
	}
	fmt.Fprintf(c.stdout, "kernelspecs %s run %s too and stay (--with-wraps removes them with this one)\n", strings.Join(names, ", "), bin)
}

// sayRunning names the kernels still running on a removed kernelspec.
func sayRunning(w io.Writer, prev *kernelspec.Previous) {
	if prev == nil {
		return
	}
	if running := control.RunningOn(prev); len(running) > 0 {
		fmt.Fprintf(w, "%d kernel(s) still running on it: %s; they run until shut down, but a restart of one fails now that its kernelspec is gone\n",
			len(running), strings.Join(running, ", "))
	}
}

// installRunArgv turns the run flags given on the command line (and not
// empty) into "--flag value" pairs in runflags.KernelspecFlags order, values as
// the flag package prints them. A relative --nvml-library path is made
// absolute: Jupyter starts the kernel from another directory.
func installRunArgv(fs *flag.FlagSet, set map[string]bool) ([]string, error) {
	var argv []string
	for _, name := range runflags.KernelspecFlags {
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
		if b, ok := fs.Lookup(name).Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			argv = append(argv, "--"+name+"="+v) // "--spare false" would end the flags
			continue
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

// unconfigureLauncher is uninstall for the wheel's kernelspec: pip
// uninstall removes the kernelspec; this removes only its settings file.
func (c *installCmd) unconfigureLauncher(stderr io.Writer, dir string) int {
	path := kernelspec.SettingsPath(dir)
	if err := rootMayWriteSettings(path); err != nil {
		return installFail(stderr, 1, err)
	}
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(c.stdout, "kernelspec %q in %s is the tfgpu-kernel wheel's, with no settings of its own; 'pip uninstall tfgpu-kernel' removes it\n", filepath.Base(dir), dir)
		return 0
	case err != nil:
		return installFail(stderr, 1, err)
	case c.dryRun:
		fmt.Fprintf(c.stdout, "would remove %s, the settings of kernelspec %q in %s (the tfgpu-kernel wheel's; 'pip uninstall tfgpu-kernel' removes it)\n", path, filepath.Base(dir), dir)
		return 0
	}
	if err := os.Remove(path); err != nil {
		return installFail(stderr, 1, err)
	}
	fmt.Fprintf(c.stdout, "removed %s, the settings of kernelspec %q in %s (the tfgpu-kernel wheel's; 'pip uninstall tfgpu-kernel' removes it)\n", path, filepath.Base(dir), dir)
	return 0
}

// rootMayWriteSettings refuses root's write of a settings file where
// another user can write (a user's venv): a link there could send it
// anywhere. That user configures their own environment.
func rootMayWriteSettings(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := kernelspec.RootMayWrite(path); err != nil {
		return fmt.Errorf("as root, settings go only where no other user can write, and %s is not such a place: %v; its owner configures it", path, err)
	}
	return nil
}
