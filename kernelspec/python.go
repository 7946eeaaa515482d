package kernelspec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ProbeTimeout bounds one Python probe: a cold interpreter importing
// ipykernel (and through it tornado, zmq, traitlets) takes seconds on a slow disk.
var ProbeTimeout = 30 * time.Second

// FallbackPython is tried after `python3` on PATH. On Debian/Ubuntu the
// python3-ipykernel package installs here, while PATH often starts with a
// pyenv or conda Python that lacks it.
var FallbackPython = "/usr/bin/python3"

// Python is an interpreter that can run ipykernel.
type Python struct {
	Executable string // absolute sys.executable: goes into kernel.json argv
	Prefix     string // sys.prefix: root of the --sys-prefix kernelspec dir
	BasePrefix string // sys.base_prefix: differs from Prefix in a venv
	Conda      bool   // Prefix is a conda environment (it has conda-meta/)
	IPykernel  string // ipykernel.__version__
	Version    string // platform.python_version()
	// Protocol is the kernel_protocol_version ipykernel's own kernelspec
	// declares (ipykernel.kernelspec.get_kernel_dict; "5.5" since 7.2,
	// none in 6.x), "" when it declares none or a malformed one.
	Protocol string
	// Args are the interpreter options ipykernel puts in its own
	// kernelspec's argv before "-m ipykernel_launcher" (`ipykernel install`
	// writes -Xfrozen_modules=off since 6.22, so that debugpy does not
	// warn at every start): ours mirrors them, so the kernel prints
	// nothing the stock one does not. Only -X options are taken.
	Args []string
}

// Env says whether py is a virtual or conda environment of its own (not
// the interpreter it was made from): its packages are installed with its
// own pip or conda, never with the system's package manager.
func (py Python) Env() bool {
	return py.Conda || (py.BasePrefix != "" && py.Prefix != py.BasePrefix)
}

// System says whether py is the operating system's Python (/usr/bin,
// prefix /usr, not a venv): Debian's python3-* packages go there.
func (py Python) System() bool {
	return !py.Env() && py.Prefix == "/usr" && filepath.Dir(py.Executable) == "/usr/bin"
}

// DebianPackages are what gives the system Python ipykernel on Debian and
// Ubuntu (jupyter-client adds the `jupyter kernelspec` command).
var DebianPackages = []string{"python3-ipykernel", "python3-jupyter-client", "jupyter-client"}

// debianHost is /etc/debian_version, there on Debian and Ubuntu.
var debianHost = func() bool { _, err := os.Stat("/etc/debian_version"); return err == nil }

// InstallAdvice is the command that gives py ipykernel: its own pip (a
// venv's, pyenv's) or conda for an environment, Debian's packages for
// Debian's own Python. A venv is never sent to apt.
func (py Python) InstallAdvice() string {
	exe := shellQuote(py.Executable)
	switch {
	case py.Conda:
		return "conda install -p " + shellQuote(py.Prefix) + " ipykernel (or " + exe + " -m pip install ipykernel)"
	case py.System() && debianHost():
		sudo := "sudo "
		if os.Geteuid() == 0 {
			sudo = ""
		}
		return sudo + "apt-get install " + strings.Join(DebianPackages, " ")
	}
	return exe + " -m pip install ipykernel"
}

// shellQuote quotes s for a shell when it needs it, so advice can be
// pasted as it is.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '+' || r == ':' || r == '@' ||
			(r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// protocolPat is the shape of a kernel_protocol_version: "MAJOR.MINOR".
var protocolPat = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}$`)

// pythonArgPat is an interpreter option taken from ipykernel's own argv.
var pythonArgPat = regexp.MustCompile(`^-X[a-z0-9_]{1,40}(=[A-Za-z0-9_.]{1,40})?$`)

// probeScript prints one JSON line; an ipykernel import error is reported,
// not raised, so the caller can say why a candidate was rejected. It asks
// ipykernel for the argv of the kernelspec `ipykernel install` would write
// (install() with a KernelSpecManager that reads the spec instead of
// installing it). install() removes the spec it wrote in a temporary
// directory but not that directory (ipykernel 6.17 to 7.x): the probe
// removes it, empty, or each install and doctor would leave one in $TMPDIR.
const probeScript = `import json, os, platform, sys
r = {"executable": sys.executable, "prefix": sys.prefix, "base_prefix": getattr(sys, "base_prefix", sys.prefix),
     "conda": os.path.isdir(os.path.join(sys.prefix, "conda-meta")), "version": platform.python_version()}
try:
    import ipykernel
    r["ipykernel"] = ipykernel.__version__
except Exception as e:
    r["error"] = "%s: %s" % (type(e).__name__, e)
try:
    from ipykernel.kernelspec import get_kernel_dict
    r["protocol"] = str(get_kernel_dict().get("kernel_protocol_version", ""))
except Exception:
    pass
try:
    from ipykernel import kernelspec as ks
    from jupyter_client.kernelspec import KernelSpecManager
    staged = []
    class Capture(KernelSpecManager):
        def install_kernel_spec(self, source_dir, *args, **kwargs):
            staged.append(os.path.dirname(os.path.abspath(str(source_dir))))
            with open(os.path.join(source_dir, "kernel.json")) as f:
                r["argv"] = [str(a) for a in json.load(f).get("argv", [])][:20]
            return source_dir
    try:
        ks.install(kernel_spec_manager=Capture())
    finally:
        for d in staged:
            if d.endswith("_kernels"):
                try:
                    os.rmdir(d)
                except OSError:
                    pass
except Exception:
    pass
sys.stdout.write("\n" + json.dumps(r) + "\n")
`

// ErrNoIPykernel means the Python ran but cannot import ipykernel.
var ErrNoIPykernel = errors.New("cannot import ipykernel")

// ProbePython runs path and asks it for sys.executable, sys.prefix and the
// ipykernel version. It fails (wrapping ErrNoIPykernel) when ipykernel cannot
// be imported; the returned Python still has Executable and Prefix then.
// path is made absolute but never resolved through links: a venv's
// bin/python3 is a link to the interpreter it was made from, and only the
// venv's path runs with the venv's packages.
func ProbePython(ctx context.Context, path string) (Python, error) {
	abs, err := exec.LookPath(path)
	if err != nil {
		return Python{}, fmt.Errorf("python %s: %w", path, err)
	}
	if abs, err = filepath.Abs(abs); err != nil {
		return Python{}, fmt.Errorf("python %s: %w", path, err)
	}
	out, err := runScript(ctx, abs, probeScript)
	if err != nil {
		return Python{}, fmt.Errorf("python %s: %w", abs, err)
	}
	var r struct {
		Executable, Prefix, IPykernel, Version, Protocol, Error string
		BasePrefix                                              string `json:"base_prefix"`
		Conda                                                   bool
		Argv                                                    []string
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return Python{}, fmt.Errorf("python %s: unexpected probe output %q: %w", abs, out, err)
	}
	py := Python{Executable: r.Executable, Prefix: r.Prefix, BasePrefix: r.BasePrefix, Conda: r.Conda,
		IPykernel: r.IPykernel, Version: r.Version, Args: ipykernelArgs(r.Argv)}
	if protocolPat.MatchString(r.Protocol) {
		py.Protocol = r.Protocol
	}
	if !filepath.IsAbs(py.Executable) { // sys.executable may be "" (embedded)
		py.Executable = abs
	}
	if r.Error != "" || r.IPykernel == "" {
		return py, fmt.Errorf("python %s: %w: %s", abs, ErrNoIPykernel, r.Error)
	}
	return py, nil
}

// ipykernelArgs are the interpreter options in ipykernel's own argv
// (between the interpreter and "-m"); none unless all are -X options.
func ipykernelArgs(argv []string) []string {
	m := slices.Index(argv, "-m")
	if m < 1 {
		return nil
	}
	args := argv[1:m]
	for _, a := range args {
		if !pythonArgPat.MatchString(a) {
			return nil
		}
	}
	return slices.Clone(args)
}

// runScript runs python -c script args… within ProbeTimeout and returns
// the last line of its output (the scripts print one JSON line last: site
// hooks may print before it). The error says whether it timed out, and
// carries the last line of its stderr.
//
// Every Python this package runs, it runs here, and never as a program a
// user controls: it runs in "/" (python -c puts the working directory
// first on sys.path, where anyone may have left a json.py), and as root
// only a Python whose file and directory are root's and writable by no
// one else (RootMayRun, the rule NVML libraries follow), isolated (-I:
// no PYTHON* variables, no user site, no script directory).
func runScript(ctx context.Context, python, script string, args ...string) (string, error) {
	argv := append([]string{"-c", script}, args...)
	if os.Geteuid() == 0 {
		if err := RootMayRun(python); err != nil {
			return "", err
		}
		argv = append([]string{"-I"}, argv...)
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, argv...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second // a child holding the pipes must not hang us
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("no answer within %v: %w", ProbeTimeout, ctx.Err())
		}
		if msg := lastLine(stderr.String()); msg != "" {
			return "", fmt.Errorf("%w (%s)", err, msg)
		}
		return "", err
	}
	return lastLine(stdout.String()), nil
}

// Candidates are the interpreters FindPython tries, in order, when none is given.
func Candidates() []string {
	var c []string
	if p, err := exec.LookPath("python3"); err == nil {
		c = append(c, p)
	}
	if len(c) == 0 || c[0] != FallbackPython {
		c = append(c, FallbackPython)
	}
	return c
}

// NoPythonError says that no Python to run ipykernel with was found, why
// each one tried was not, and the command that would fix it.
type NoPythonError struct {
	Tried []string // one line per Python tried: why it was refused
	// Advice installs ipykernel where the user's Python is: the one
	// given, a venv or conda environment on PATH, or else each candidate.
	Advice []string
	// Apt says that Debian's packages (DebianPackages) would give a
	// usable Python: the one to use is /usr/bin/python3, Debian's own.
	Apt bool
}

func (e *NoPythonError) Error() string {
	return fmt.Sprintf("%s; install it with: %s", strings.Join(e.Tried, "; "), strings.Join(e.Advice, ", or "))
}

func (e *NoPythonError) Unwrap() error { return ErrNoIPykernel }

// FindPython returns the Python to run the kernel with: explicit if given
// (which must import ipykernel), else the first of Candidates that does.
// A venv or conda environment first on PATH is the user's choice: when it
// lacks ipykernel, the search stops there rather than falling back to
// another Python behind the user's back. The error is a *NoPythonError
// when Pythons ran but none imports ipykernel.
func FindPython(ctx context.Context, explicit string) (Python, error) {
	return findPython(ctx, explicit, nil)
}

// FindSystemWidePython is FindPython for a kernelspec every user runs: a
// Python that fails CheckSystemWide is refused (explicit) or skipped
// before it is ever run.
func FindSystemWidePython(ctx context.Context, explicit string) (Python, error) {
	return findPython(ctx, explicit, CheckSystemWide)
}

func findPython(ctx context.Context, explicit string, check func(string) error) (Python, error) {
	checked := func(p string) error {
		if check == nil {
			return nil
		}
		abs, err := exec.LookPath(p)
		if err == nil {
			abs, err = filepath.Abs(abs)
		}
		if err != nil {
			return fmt.Errorf("python %s: %w", p, err)
		}
		if err := check(abs); err != nil {
			return fmt.Errorf("python %s cannot serve every user: %w", abs, err)
		}
		return nil
	}
	if explicit != "" {
		if err := checked(explicit); err != nil {
			return Python{}, err
		}
		py, err := ProbePython(ctx, explicit)
		if err != nil && errors.Is(err, ErrNoIPykernel) {
			return py, &NoPythonError{Tried: []string{err.Error()}, Advice: []string{py.InstallAdvice()},
				Apt: py.System() && debianHost()}
		}
		return py, err
	}
	e := &NoPythonError{}
	for i, c := range Candidates() {
		if err := checked(c); err != nil {
			e.Tried = append(e.Tried, err.Error())
			continue
		}
		py, err := ProbePython(ctx, c)
		if err == nil {
			return py, nil
		}
		e.Tried = append(e.Tried, err.Error())
		if !errors.Is(err, ErrNoIPykernel) {
			continue
		}
		e.Advice = append(e.Advice, py.InstallAdvice())
		if py.System() && debianHost() {
			e.Apt = true
		}
		if i == 0 && py.Env() {
			kind := "virtual environment"
			if py.Conda {
				kind = "conda environment"
			}
			e.Tried = []string{fmt.Sprintf("python3 on PATH is the %s %s, and %s (give --python to use another Python)",
				kind, py.Prefix, err.Error())}
			e.Advice, e.Apt = e.Advice[:1], false
			return Python{}, e
		}
	}
	if len(e.Advice) == 0 { // nothing ran at all
		return Python{}, fmt.Errorf("%w: no Python to run it with (give one with --python): %s", ErrNoIPykernel, strings.Join(e.Tried, "; "))
	}
	return Python{}, e
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}
