package kernelspec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// ProbeTimeout bounds one Python probe: a cold interpreter importing
// ipykernel (and through it tornado, zmq, traitlets) takes seconds on a slow disk.
var ProbeTimeout = 30 * time.Second

// FallbackPython is tried after `python3` on PATH. On Debian/Ubuntu the
// python3-ipykernel package installs here, while PATH often starts with a
// pyenv or conda Python that lacks it.
const FallbackPython = "/usr/bin/python3"

// Python is an interpreter that can run ipykernel.
type Python struct {
	Executable string // absolute sys.executable: goes into kernel.json argv
	Prefix     string // sys.prefix: root of the --sys-prefix kernelspec dir
	IPykernel  string // ipykernel.__version__
	Version    string // platform.python_version()
	// Protocol is the kernel_protocol_version ipykernel's own kernelspec
	// declares (ipykernel.kernelspec.get_kernel_dict; "5.5" since 7.2,
	// none in 6.x), "" when it declares none or a malformed one.
	Protocol string
}

// protocolPat is the shape of a kernel_protocol_version: "MAJOR.MINOR".
var protocolPat = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}$`)

// probeScript prints one JSON line; an ipykernel import error is reported,
// not raised, so the caller can say why a candidate was rejected.
const probeScript = `import json, platform, sys
r = {"executable": sys.executable, "prefix": sys.prefix, "version": platform.python_version()}
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
sys.stdout.write("\n" + json.dumps(r) + "\n")
`

// ErrNoIPykernel means the Python ran but cannot import ipykernel.
var ErrNoIPykernel = errors.New("cannot import ipykernel")

// ProbePython runs path and asks it for sys.executable, sys.prefix and the
// ipykernel version. It fails (wrapping ErrNoIPykernel) when ipykernel cannot
// be imported; the returned Python still has Executable and Prefix then.
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
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return Python{}, fmt.Errorf("python %s: unexpected probe output %q: %w", abs, out, err)
	}
	py := Python{Executable: r.Executable, Prefix: r.Prefix, IPykernel: r.IPykernel, Version: r.Version}
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

// runScript runs python -c script args… within ProbeTimeout and returns
// the last line of its output (the scripts print one JSON line last: site
// hooks may print before it). The error says whether it timed out, and
// carries the last line of its stderr.
func runScript(ctx context.Context, python, script string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, append([]string{"-c", script}, args...)...)
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

// FindPython returns the Python to run the kernel with: explicit if given
// (which must import ipykernel), else the first of Candidates that does.
// The error names every candidate and why it was rejected.
func FindPython(ctx context.Context, explicit string) (Python, error) {
	if explicit != "" {
		return ProbePython(ctx, explicit)
	}
	var why []string
	for _, c := range Candidates() {
		py, err := ProbePython(ctx, c)
		if err == nil {
			return py, nil
		}
		why = append(why, err.Error())
	}
	return Python{}, fmt.Errorf("%w in any candidate Python (give one with --python): %s",
		ErrNoIPykernel, strings.Join(why, "; "))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}
