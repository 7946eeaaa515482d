package kernelspec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A Command is one `tfgpu-kernel install` command line, its flags parsed:
// Install and Uninstall do what it asks and say what they did on Out, a
// line each. Their errors are the command's, one line each; a usage error
// is ErrInvalid.
type Command struct {
	Options                            // as given; Install fills in the rest
	Given     Upgrade                  // the flags given, and run's rules for the run flags
	UserGiven bool                     // --user: root's own kernelspec, even over one for every user
	Reset     bool                     // --reset: keep nothing of the installed kernelspec
	DryRun    bool                     // say what would be done; write nothing
	WithWraps bool                     // Uninstall: remove the Twins too
	Out       io.Writer                // what was done (or would be)
	Running   func(*Previous) []string // the kernels running on a kernelspec (control.RunningOn)
	Failed    func(error)              // a twin not removed; Uninstall goes on, then returns ErrTwinsLeft
}

// ErrTwinsLeft means Uninstall could not remove a twin of WithWraps; it
// told Failed why.
var ErrTwinsLeft = errors.New("a kernelspec that runs this binary too was not removed")

// Install writes the kernelspec, keeping what an installed one of ours
// was configured with (Keep), after checking every setting as run would.
// Into the wheel's kernelspec it writes the settings file instead.
func (c *Command) Install() error {
	if os.Geteuid() == 0 && c.Dest == User && !c.UserGiven {
		if err := c.rootWithoutDest(); err != nil {
			return err
		}
	}
	o := &c.Options
	bin, err := selfPath()
	if err != nil {
		return err
	}
	o.Binary = bin
	if dir, err := SpecDir(context.Background(), *o); err == nil && IsLauncherSpec(dir) {
		return c.configureLauncher(dir)
	}
	kept, prev, err := c.settle()
	if err != nil {
		return err
	}
	install, verb := Install, "installed"
	if c.DryRun {
		install, verb = Plan, "would install"
	}
	res, err := install(*o)
	if err != nil {
		if prev != nil && prev.Python != "" && !c.Given.Set["python"] && errors.Is(err, ErrNoIPykernel) {
			err = fmt.Errorf("the installed kernelspec %s runs %w; or give another with --python", prev.Dir, err)
		}
		return err
	}
	if len(kept) > 0 {
		fmt.Fprintf(c.Out, "kept from the installed kernelspec: %s\n", strings.Join(kept, ", "))
	}
	if prev != nil && prev.Python != "" && res.Wrapped == nil && prev.Python != res.Python.Executable {
		fmt.Fprintf(c.Out, "python changed: %s → %s\n", prev.Python, res.Python.Executable)
	}
	if w := res.Wrapped; w != nil {
		fmt.Fprintf(c.Out, "%s kernelspec %q (%q) in %s; it runs kernelspec %q from %s under tfgpu-kernel\n",
			verb, filepath.Base(res.Dir), res.DisplayName, res.Dir, w.Name, w.Dir)
		return nil
	}
	fmt.Fprintf(c.Out, "%s kernelspec %q (%q) in %s; python %s (ipykernel %s)\n",
		verb, filepath.Base(res.Dir), res.DisplayName, res.Dir, res.Python.Executable, res.Python.IPykernel)
	return nil
}

// rootWithoutDest refuses root's install that names no destination when a
// kernelspec of ours of the same name is there for every user: root's own
// (the default, --user) would hide it from root's Jupyter, and its
// settings with it (#34; install.sh refuses the same). Root says which.
func (c *Command) rootWithoutDest() error {
	sysOpts := c.Options
	sysOpts.Dest = System
	sys, err := SpecDir(context.Background(), sysOpts)
	if err != nil {
		return nil // the install itself says what is wrong with the name
	}
	if p, err := ReadPrevious(sys); p == nil && (err == nil || errors.Is(err, ErrNotOurs)) {
		return nil
	}
	own, err := SpecDir(context.Background(), c.Options)
	if err != nil {
		return nil
	}
	return invalid(nil, "as root without --user or --system: %s is the kernelspec %q for every user, and root's own in %s would hide it (and its settings) from root's Jupyter; give --system to upgrade that one, or --user for root's own",
		sys, filepath.Base(sys), own)
}

// settle fills in what is kept from the installed kernelspec of ours that
// Replace upgrades (Keep; not with Reset), checks every setting as run
// will (Given.Check) and puts the run flags into RunFlags.
func (c *Command) settle() (kept []string, prev *Previous, err error) {
	if c.Replace && !c.Reset {
		if kept, prev, err = Keep(context.Background(), &c.Options, c.Given); err != nil {
			return nil, nil, err
		}
	}
	if err := c.Given.Check(); err != nil {
		return nil, nil, invalid(err, "%v", err)
	}
	if c.RunFlags, err = c.Given.runArgv(); err != nil {
		return nil, nil, invalid(err, "%v", err)
	}
	return kept, prev, nil
}

// runArgv turns the run flags given on the command line (and not empty)
// into "--flag value" pairs in RunFlags order, values as the flag package
// prints them. A relative --nvml-library path is made absolute: Jupyter
// starts the kernel from another directory.
func (u Upgrade) runArgv() ([]string, error) {
	var argv []string
	for _, name := range u.RunFlags {
		if !u.Set[name] {
			continue
		}
		v := u.Flags.Lookup(name).Value.String()
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
		if b, ok := u.Flags.Lookup(name).Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			argv = append(argv, "--"+name+"="+v) // "--spare false" would end the flags
			continue
		}
		argv = append(argv, "--"+name, v)
	}
	return argv, nil
}

// configureLauncher configures the wheel's kernelspec in dir, which is
// pip's: its settings (run flags, --env) go into its settings file,
// PREFIX/etc/jupyter/tfgpu-kernel.json, which pip upgrades keep; what the
// file held is kept unless given again, as an upgrade keeps a kernelspec's
// (docs/design.md#the-wheel).
func (c *Command) configureLauncher(dir string) error {
	switch {
	case c.Wrap != "":
		return invalid(nil, "%s is the tfgpu-kernel wheel's kernelspec, not one to wrap into; give --name for the twin", dir)
	case c.Given.Set["display-name"]:
		return invalid(nil, "%s is the tfgpu-kernel wheel's kernelspec: pip writes its kernel.json, display name included; for another name install a kernelspec of your own with --name NAME", dir)
	}
	c.Replace = true // its settings file, read back as a kernelspec's
	kept, _, err := c.settle()
	if err != nil {
		return err
	}
	path := SettingsPath(dir)
	if err := rootMayWriteSettings(path); err != nil {
		return err
	}
	env := c.Given.Env
	var words []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		words = append(words, "--env "+k+"="+env[k])
	}
	what := strings.Join(append(slices.Clone(c.RunFlags), words...), " ")
	if what == "" {
		what = "none (the defaults)"
	}
	if len(kept) > 0 {
		fmt.Fprintf(c.Out, "kept from %s: %s\n", path, strings.Join(kept, ", "))
	}
	if c.DryRun {
		fmt.Fprintf(c.Out, "would configure kernelspec %q in %s (the tfgpu-kernel wheel's) in %s: %s\n", filepath.Base(dir), dir, path, what)
		return nil
	}
	if err := WriteSettings(path, Settings{RunFlags: c.RunFlags, Env: env}); err != nil {
		return err
	}
	fmt.Fprintf(c.Out, "configured kernelspec %q in %s (the tfgpu-kernel wheel's; pip upgrades keep its settings) in %s: %s\n", filepath.Base(dir), dir, path, what)
	return nil
}

// Uninstall removes the kernelspec and says which kernels still run on
// it. Removing the main kernelspec (not a --wrap twin), it names the other
// kernelspecs of ours that run this binary: they stop working when the
// binary goes, as install.sh --uninstall removes it next (#34), and
// WithWraps removes them too.
func (c *Command) Uninstall() error {
	dir, err := SpecDir(context.Background(), c.Options)
	if err != nil {
		return err
	}
	prev, prevErr := ReadPrevious(dir)
	if prev != nil && prev.Launcher {
		return c.unconfigureLauncher(dir)
	}
	var bin string
	var others []Spec
	if c.Wrap == "" {
		if bin, err = selfPath(); err != nil {
			return err
		}
		others = Twins(context.Background(), bin, dir, prev)
	}
	if c.DryRun {
		switch {
		case prevErr != nil:
			return fmt.Errorf("would remove nothing: %v", prevErr)
		case prev == nil && !(c.WithWraps && len(others) > 0):
			return fmt.Errorf("would remove nothing: no kernelspec at %s", dir)
		case prev != nil:
			fmt.Fprintf(c.Out, "would remove kernelspec %q from %s\n", filepath.Base(dir), dir)
		}
		if !c.WithWraps {
			c.nameOthers(bin, others)
			return nil
		}
		for _, sp := range others {
			fmt.Fprintf(c.Out, "would remove kernelspec %q from %s (it runs %s too)\n", sp.Name, sp.Dir, bin)
		}
		return nil
	}
	switch dir, err = Uninstall(c.Options); {
	case err == nil:
		fmt.Fprintf(c.Out, "removed kernelspec %q from %s\n", filepath.Base(dir), dir)
		c.sayRunning(prev)
	case c.WithWraps && errors.Is(err, fs.ErrNotExist) && len(others) > 0:
		fmt.Fprintf(c.Out, "no kernelspec %q at %s\n", filepath.Base(dir), dir) // gone already: its twins still go
	default:
		return err
	}
	if !c.WithWraps {
		c.nameOthers(bin, others)
		return nil
	}
	err = nil
	for _, sp := range others {
		p, _ := ReadPrevious(sp.Dir)
		if e := UninstallDir(sp.Dir); e != nil {
			c.Failed(e)
			err = ErrTwinsLeft
			continue
		}
		fmt.Fprintf(c.Out, "removed kernelspec %q from %s (it ran %s too)\n", sp.Name, sp.Dir, bin)
		c.sayRunning(p)
	}
	return err
}

// Twins are the kernelspecs of ours other than the one in dir
// that run bin, in the directories Jupyter searches as the removed
// kernelspec's Python (its sys.prefix: a --sys-prefix twin) and the
// default ones see them, and in dir's own kernels directory; only those
// this user may remove: a user uninstalling their own kernelspec of the
// system's binary is not told of root's, which --with-wraps could not
// remove and which keep their binary.
func Twins(ctx context.Context, bin, dir string, prev *Previous) []Spec {
	var pythons []string
	if prev != nil && prev.Python != "" {
		pythons = append(pythons, prev.Python)
	}
	for _, p := range Candidates() {
		if !slices.Contains(pythons, p) {
			pythons = append(pythons, p)
		}
	}
	self, _ := os.Stat(dir)
	var out []Spec
	for _, sp := range RunsBinary(ctx, bin, pythons, filepath.Dir(dir)) {
		if fi, err := os.Stat(sp.Dir); sp.Dir == dir || err == nil && self != nil && os.SameFile(fi, self) {
			continue
		}
		if unix.Access(filepath.Dir(sp.Dir), unix.W_OK) != nil {
			continue
		}
		out = append(out, sp)
	}
	return out
}

// nameOthers says, in one line, which other kernelspecs run bin.
func (c *Command) nameOthers(bin string, others []Spec) {
	if len(others) == 0 {
		return
	}
	names := make([]string, len(others))
	for i, sp := range others {
		names[i] = fmt.Sprintf("%q in %s", sp.Name, sp.Dir)
	}
	if len(others) == 1 {
		fmt.Fprintf(c.Out, "kernelspec %s runs %s too and stays (--with-wraps removes it with this one)\n", names[0], bin)
		return
	}
	fmt.Fprintf(c.Out, "kernelspecs %s run %s too and stay (--with-wraps removes them with this one)\n", strings.Join(names, ", "), bin)
}

// sayRunning names the kernels still running on a removed kernelspec.
func (c *Command) sayRunning(prev *Previous) {
	if prev == nil {
		return
	}
	if running := c.Running(prev); len(running) > 0 {
		fmt.Fprintf(c.Out, "%d kernel(s) still running on it: %s; they run until shut down, but a restart of one fails now that its kernelspec is gone\n",
			len(running), strings.Join(running, ", "))
	}
}

// unconfigureLauncher is Uninstall for the wheel's kernelspec: pip
// uninstall removes the kernelspec; this removes only its settings file.
func (c *Command) unconfigureLauncher(dir string) error {
	path := SettingsPath(dir)
	if err := rootMayWriteSettings(path); err != nil {
		return err
	}
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(c.Out, "kernelspec %q in %s is the tfgpu-kernel wheel's, with no settings of its own; 'pip uninstall tfgpu-kernel' removes it\n", filepath.Base(dir), dir)
		return nil
	case err != nil:
		return err
	case c.DryRun:
		fmt.Fprintf(c.Out, "would remove %s, the settings of kernelspec %q in %s (the tfgpu-kernel wheel's; 'pip uninstall tfgpu-kernel' removes it)\n", path, filepath.Base(dir), dir)
		return nil
	}
	if err := os.Remove(path); err != nil {
		return err
	}
	fmt.Fprintf(c.Out, "removed %s, the settings of kernelspec %q in %s (the tfgpu-kernel wheel's; 'pip uninstall tfgpu-kernel' removes it)\n", path, filepath.Base(dir), dir)
	return nil
}

// rootMayWriteSettings refuses root's write of a settings file where
// another user can write (a user's venv): a link there could send it
// anywhere. That user configures their own environment.
func rootMayWriteSettings(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := RootMayWrite(path); err != nil {
		return fmt.Errorf("as root, settings go only where no other user can write, and %s is not such a place: %v; its owner configures it", path, err)
	}
	return nil
}

// selfPath is the running binary, symlinks resolved, so the kernelspec
// keeps working when a symlink (e.g. in ~/.local/bin) is moved.
func selfPath() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	return filepath.Abs(p)
}
