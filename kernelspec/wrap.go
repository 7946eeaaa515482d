package kernelspec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
)

// ErrNoSuchKernel means Jupyter knows no kernelspec of the name given to wrap.
var ErrNoSuchKernel = errors.New("no such kernelspec")

// usageErr is a usage error (errors.Is ErrInvalid, and also also) whose
// message is just msg: the wrap errors say what is wrong in their own words.
type usageErr struct {
	msg  string
	also error
}

func (e *usageErr) Error() string { return e.msg }
func (e *usageErr) Unwrap() []error {
	if e.also == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.also}
}

func invalid(also error, format string, args ...any) error {
	return &usageErr{msg: fmt.Sprintf(format, args...), also: also}
}

// Foreign is an existing kernelspec, read to be wrapped. It is never written.
type Foreign struct {
	Name string // as Jupyter lists it: the directory name, lower-cased
	Dir  string // its resource directory (where kernel.json and logos are)

	Argv          []string
	DisplayName   string
	Language      string
	InterruptMode string // "" when kernel.json has none
	Protocol      string // kernel_protocol_version; "" when none (or not "MAJOR.MINOR")
	Env           map[string]string
	Metadata      map[string]json.RawMessage // kept as written

	// Python, when set, replaces an argv[0] of "python", "python3" or
	// "python3.N": jupyter_client launches such a spec with its own
	// sys.executable, and behind the supervisor the name would instead be
	// looked up on PATH (pyenv's Python, not the venv's). Install sets it
	// to the Python whose jupyter_client found the spec.
	Python string
}

// barePython matches the argv[0] jupyter_client replaces with sys.executable.
var barePython = regexp.MustCompile(`^python(3(\.[0-9]+)?)?$`)

// WrapName is the default name of the kernelspec wrapping wrap (a name or a
// directory): "<name>-tfgpu".
func WrapName(wrap string) string {
	if isPathArg(wrap) {
		wrap = filepath.Clean(wrap)
		if filepath.Base(wrap) == "kernel.json" {
			wrap = filepath.Dir(wrap)
		}
		wrap = filepath.Base(wrap)
	}
	return strings.ToLower(wrap) + "-tfgpu"
}

// isPathArg says whether --wrap's argument names a directory rather than a
// kernel name (a name never contains '/').
func isPathArg(s string) bool {
	return strings.ContainsRune(s, os.PathSeparator) || s == "." || s == ".."
}

// ReadSpec reads the kernelspec in dir (or the kernel.json file dir names).
func ReadSpec(dir string) (Foreign, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Foreign{}, fmt.Errorf("kernelspec %s: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
		abs = filepath.Dir(abs)
	}
	data, err := os.ReadFile(filepath.Join(abs, "kernel.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return Foreign{}, invalid(ErrNoSuchKernel, "no kernelspec in %s: it has no kernel.json", abs)
	}
	if err != nil {
		return Foreign{}, fmt.Errorf("read kernelspec: %w", err)
	}
	return parseSpec(strings.ToLower(filepath.Base(abs)), abs, data)
}

// parseSpec checks that a kernelspec can be wrapped and returns it: its argv
// must pass the connection file as an argument of its own (the supervisor
// replaces exactly those with its inner connection file), and it must not be
// ours already (a supervisor under a supervisor would relay twice).
func parseSpec(name, dir string, data []byte) (Foreign, error) {
	var s struct {
		Argv          []string                   `json:"argv"`
		DisplayName   string                     `json:"display_name"`
		Language      string                     `json:"language"`
		InterruptMode string                     `json:"interrupt_mode"`
		Env           map[string]string          `json:"env"`
		Metadata      map[string]json.RawMessage `json:"metadata"`
		Protocol      any                        `json:"kernel_protocol_version"`
	}
	kj := filepath.Join(dir, "kernel.json")
	if err := json.Unmarshal(data, &s); err != nil {
		return Foreign{}, invalid(err, "kernelspec %q: %s: %v", name, kj, err)
	}
	switch {
	case isOurs(data):
		return Foreign{}, invalid(nil, "refusing to wrap %q (%s): it already runs under tfgpu-kernel", name, dir)
	case len(s.Argv) == 0:
		return Foreign{}, invalid(nil, "cannot wrap %q: its argv is empty (%s)", name, kj)
	case !slices.Contains(s.Argv, "{connection_file}"):
		return Foreign{}, invalid(nil, "cannot wrap %q: its argv has no \"{connection_file}\" argument for the supervisor to replace (%s)", name, kj)
	}
	f := Foreign{
		Name: name, Dir: dir, Argv: s.Argv, DisplayName: s.DisplayName, Language: s.Language,
		InterruptMode: s.InterruptMode, Env: s.Env, Metadata: s.Metadata,
	}
	if p, ok := s.Protocol.(string); ok && protocolPat.MatchString(p) {
		f.Protocol = p // anything else is left out: jupyter_client reads it as a string
	}
	return f, nil
}

// findScript asks jupyter_client for a kernelspec by name: the same search
// (JUPYTER_PATH, the user data dir, sys.prefix, system dirs, in
// jupyter_core's order for its version) and the same native-kernel fallback
// a Jupyter server run by this Python uses. It prints one JSON line.
const findScript = `import json, sys
try:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
except Exception as e:
    sys.stdout.write("\n" + json.dumps({"error": "cannot import jupyter_client: %s: %s" % (type(e).__name__, e)}) + "\n")
    sys.exit(0)
m = KernelSpecManager()
try:
    s = m.get_kernel_spec(sys.argv[1])
    r = {"dir": s.resource_dir, "spec": s.to_dict()}
except NoSuchKernel:
    r = {"missing": sorted(m.find_kernel_specs())}
sys.stdout.write("\n" + json.dumps(r) + "\n")
`

// FindSpec finds the kernelspec called name the way py's jupyter_client
// does. Its kernel.json is read from disk when there is one; the native
// kernel jupyter_client makes up without a file comes from its to_dict().
func FindSpec(ctx context.Context, py Python, name string) (Foreign, error) {
	key := strings.ToLower(name)
	if !namePat.MatchString(key) {
		return Foreign{}, invalid(ErrNoSuchKernel, "no kernelspec %q: not a kernel name (a kernelspec directory needs a '/': ./%s)", name, name)
	}
	fail := func(why string) (Foreign, error) {
		return Foreign{}, fmt.Errorf("find kernelspec %q with python %s: %s", name, py.Executable, oneLine(why))
	}
	out, err := runScript(ctx, py.Executable, findScript, key)
	if err != nil {
		return fail(err.Error())
	}
	var r struct {
		Error   string          `json:"error"`
		Missing []string        `json:"missing"`
		Dir     string          `json:"dir"`
		Spec    json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return fail(fmt.Sprintf("unexpected output %q", out))
	}
	switch {
	case r.Error != "":
		return fail(r.Error)
	case r.Missing != nil:
		return Foreign{}, invalid(ErrNoSuchKernel, "no kernelspec %q among those python %s finds: %s (see 'jupyter kernelspec list')",
			name, py.Executable, strings.Join(r.Missing, ", "))
	case !filepath.IsAbs(r.Dir):
		return fail(fmt.Sprintf("resource_dir %q is not absolute", r.Dir))
	}
	data, err := os.ReadFile(filepath.Join(r.Dir, "kernel.json"))
	if errors.Is(err, fs.ErrNotExist) {
		data, err = r.Spec, nil // ipykernel's built-in python3 spec
	}
	if err != nil {
		return Foreign{}, fmt.Errorf("read kernelspec %q: %w", name, err)
	}
	return parseSpec(key, r.Dir, data)
}

// WrapJSON renders kernel.json for a kernelspec that runs f's argv (a bare
// "python" resolved, see Foreign.Python) under the supervisor. It keeps
// f's language, interrupt_mode (default
// "signal"), kernel_protocol_version, env (over DefaultEnv, under o.Env)
// and metadata (debugger
// true when theirs does not say and their argv runs ipykernel;
// supported_encryption what the supervisor speaks, see
// SupportedEncryption), and records what it wraps in metadata.tfgpu.
func WrapJSON(o Options, f Foreign) ([]byte, error) {
	theirs := f.Argv
	if f.Python != "" && len(theirs) > 0 && barePython.MatchString(theirs[0]) {
		theirs = append([]string{f.Python}, theirs[1:]...)
	}
	argv, err := runArgv(o, theirs)
	if err != nil {
		return nil, err
	}
	env, err := mergeEnv(DefaultEnv, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range f.Env {
		env[k] = v
	}
	if env, err = mergeEnv(env, o.Env); err != nil {
		return nil, err
	}
	display := o.DisplayName
	if display == "" {
		theirs := f.DisplayName
		if theirs == "" {
			theirs = f.Name
		}
		display = theirs + " (clean restart)"
	}
	mode := f.InterruptMode
	if mode == "" {
		mode = "signal" // jupyter_client's default for a spec without one
	}
	md := make(map[string]any, len(f.Metadata)+2)
	for k, v := range f.Metadata {
		md[k] = v
	}
	// The outer sockets are the supervisor's, so what is supported is what
	// it speaks, whatever theirs said.
	md["supported_encryption"] = SupportedEncryption
	if _, ok := md["debugger"]; !ok && slices.ContainsFunc(f.Argv, func(a string) bool { return strings.Contains(a, "ipykernel") }) {
		md["debugger"] = true // ipykernel speaks the debug protocol; other kernels may not
	}
	md["tfgpu"] = &tfgpuTag{Version: version(o), Wraps: f.Name, WrapsDir: f.Dir}
	return encodeSpec(spec{
		Argv: argv, DisplayName: display, Language: f.Language, InterruptMode: mode, Env: env, Metadata: md,
		KernelProtocolVersion: f.Protocol,
	})
}

// maxResource bounds a logo, kernel.js or kernel.css copied from the
// wrapped kernelspec: theirs is read, not trusted.
const maxResource = 4 << 20

// resources returns the files Jupyter serves from f's directory that the
// wrapper should show too: its logo-* files (else none, and ours are used)
// and kernel.js / kernel.css, which frontends load for its language. Only
// regular files are copied, never through a link (opened with O_NOFOLLOW:
// a link planted as logo-64x64.png → /etc/shadow would have root copy the
// secret into a kernelspec every user can read), and a copy is never
// readable by more than its original (mode: theirs, at most 0644). With
// rootsOnly (a kernelspec for every user) each file copied must be root's
// and writable by no one else, judged on the file opened: kernel.js runs
// in every user's Notebook page.
func (f Foreign) resources(rootsOnly bool) (logos, other map[string]specFile, err error) {
	ents, err := os.ReadDir(f.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read kernelspec %q: %w", f.Name, err)
	}
	logos, other = map[string]specFile{}, map[string]specFile{}
	for _, e := range ents {
		n := e.Name()
		isLogo := strings.HasPrefix(n, "logo-")
		if !isLogo && n != "kernel.js" && n != "kernel.css" {
			continue
		}
		p := filepath.Join(f.Dir, n)
		b, fi, err := readRegular(p)
		if errors.Is(err, errNotRegular) {
			continue // a link, a directory, a fifo: not copied
		}
		if err != nil {
			return nil, nil, fmt.Errorf("copy %s: %w", p, err)
		}
		if rootsOnly {
			if err := rootsAlone(p, fi); err != nil {
				return nil, nil, invalid(nil, "kernelspec %q cannot serve every user: %v", f.Name, err)
			}
		}
		sf := specFile{data: b, mode: fi.Mode().Perm() & 0o644}
		if isLogo {
			logos[n] = sf
		} else {
			other[n] = sf
		}
	}
	return logos, other, nil
}

var errNotRegular = errors.New("not a regular file")

// readRegular reads p, which must be a regular file (not a link to one),
// of at most maxResource bytes, and returns what fstat says of it.
func readRegular(p string) ([]byte, fs.FileInfo, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, errNotRegular
	}
	if err != nil {
		return nil, nil, err
	}
	file := os.NewFile(uintptr(fd), p)
	defer file.Close()
	fi, err := file.Stat()
	switch {
	case err != nil:
		return nil, nil, err
	case !fi.Mode().IsRegular():
		return nil, nil, errNotRegular
	case fi.Size() > maxResource:
		return nil, nil, fmt.Errorf("%d bytes, more than a kernelspec resource has (%d)", fi.Size(), maxResource)
	}
	b, err := io.ReadAll(io.LimitReader(file, maxResource+1))
	if err == nil && len(b) > maxResource {
		err = fmt.Errorf("more than %d bytes", maxResource)
	}
	return b, fi, err
}

// oneLine joins a multi-line message so an error stays one line on stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
