package kernelspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/tfgpu/tfgpu-kernel/internal/rootfile"
)

// ErrNotRootsProgram means root was to run a program someone else could
// change; it is not run (as root, this package runs only RootMayRun ones).
var ErrNotRootsProgram = errors.New("root runs only programs no other user can change")

// RootMayRun says why root must not run path, or nil: the program, as
// named and with its links resolved, and the directory of each, must be
// root's and writable by no one else (the rule for NVML libraries,
// docs/security.md). A venv in a user's home fails it; Debian's
// /usr/bin/python3 and a root-owned /opt/conda pass.
func RootMayRun(path string) error {
	abs, err := exec.LookPath(path)
	if err == nil {
		abs, err = filepath.Abs(abs)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var nr *rootfile.NotRoots
	switch err := rootfile.Check(abs); {
	case errors.As(err, &nr):
		return fmt.Errorf("%w: %v", ErrNotRootsProgram, nr)
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ErrNotRoot means a system-wide install was asked for by another user.
var ErrNotRoot = errors.New("only root installs for every user")

// checkSystemWideInstall refuses a system-wide install by anyone but root,
// or of a binary a user could change (checked before anything is run).
func checkSystemWideInstall(o Options) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: --system writes %s (run it as root: sudo tfgpu-kernel install --system)",
			ErrNotRoot, filepath.Join(SystemDataDir, "kernels"))
	}
	if err := CheckSystemWide(o.Binary); err != nil {
		return invalid(nil, "the supervisor %s cannot serve every user: %v (install it in /usr/local/bin: ./install.sh --system)", o.Binary, err)
	}
	return nil
}

// checkSystemWideKernel refuses to wrap, for every user, a kernel whose
// program a user could change (a venv or conda env in a home directory).
func checkSystemWideKernel(f Foreign) error {
	prog := f.Argv[0]
	if f.Python != "" && barePython.MatchString(prog) {
		prog = f.Python
	}
	abs, err := exec.LookPath(prog)
	if err == nil {
		err = CheckSystemWide(abs)
	}
	if err != nil {
		return invalid(nil, "kernelspec %q runs %s, which cannot serve every user: %v", f.Name, prog, err)
	}
	return nil
}

// checkSystemWideSpec refuses to take, for every user, a kernelspec whose
// kernel.json (its argv, its env), or the directory holding it and the
// logos, kernel.js and kernel.css copied from there, or any directory
// above, a user could change: root copies what it finds there into the
// kernelspec every user runs, at install and again at every upgrade
// (which wraps the same directory). The files copied are checked as they
// are read (Foreign.resources).
func checkSystemWideSpec(f Foreign) error {
	p := filepath.Join(f.Dir, "kernel.json")
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		p = f.Dir // the spec jupyter_client makes up for ipykernel: its logos are still copied from here
	}
	if err := checkRootsAlone(p); err != nil {
		return invalid(nil, "kernelspec %q cannot serve every user: %v", f.Name, err)
	}
	return nil
}

// checkSystemWidePaths refuses a kernelspec for every user whose argv or
// env names a path (a value, or an element of a list such as PYTHONPATH
// or LD_LIBRARY_PATH, or a flag's value after '=') that a user could
// change: what a kernel finds there (a sitecustomize.py on PYTHONPATH, a
// library, a program on PATH) runs in every user's kernel. Each absolute
// path must be root's, and every directory above it, writable by no one
// else (checkRootsAlone; /tmp is refused too). Relative ones are each
// user's own (the notebook's directory).
func checkSystemWidePaths(kj []byte) error {
	var s struct {
		Argv []string          `json:"argv"`
		Env  map[string]string `json:"env"`
	}
	if err := json.Unmarshal(kj, &s); err != nil {
		return err
	}
	for _, a := range s.Argv {
		if err := checkPathsIn(a); err != nil {
			return invalid(nil, "the kernelspec's argument %q cannot serve every user: %v", a, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if err := checkPathsIn(s.Env[k]); err != nil {
			return invalid(nil, "env %s=%s cannot serve every user: %v", k, s.Env[k], err)
		}
	}
	return nil
}

// checkPathsIn checks each absolute path in v, split at ':' ',' ';' '='
// and white space.
func checkPathsIn(v string) error {
	split := func(r rune) bool { return r == ':' || r == ',' || r == ';' || r == '=' || unicode.IsSpace(r) }
	for _, p := range strings.FieldsFunc(v, split) {
		if !strings.HasPrefix(p, "/") {
			continue
		}
		if err := checkRootsAlone(p); err != nil {
			return err
		}
	}
	return nil
}

// CheckSystemWide says why path may not be named in a kernelspec that
// every user's Jupyter runs (Dest System), or nil. Every user would run
// that program as themselves, so nobody but root may be able to change
// it: the file and every directory above it (as written, and again
// through its links) must be root's and writable by no one else. And
// every user must be able to run it: the directories searchable and the
// file executable by others. The check is done before the program is ever
// run, so root never runs a program a user could have written.
func CheckSystemWide(path string) error {
	return checkPath(path, true)
}

// RootMayWrite says why root must not write path, or nil: path if it
// exists, else the nearest directory above it that does, and every
// directory above that, must be root's and writable by no one else;
// otherwise another user could have the write land elsewhere (a link in
// the chain) or change what root wrote.
// A sticky directory (/tmp) may be writable by others: they cannot
// rename or replace root's entries in it.
func RootMayWrite(path string) error {
	p, err := nearestExisting(path)
	if err != nil {
		return err
	}
	for {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode()
		switch {
		case !ok:
			return fmt.Errorf("%s: no owner to check", p)
		case st.Uid != 0:
			return fmt.Errorf("%s is owned by %s, not root", p, owner(st.Uid))
		case mode&os.ModeSymlink == 0 && mode.Perm()&0o022 != 0 && mode&os.ModeSticky == 0:
			return fmt.Errorf("%s is writable by %s (mode %s)", p, writers(mode), rootfile.Octal(mode))
		}
		if p == "/" {
			return nil
		}
		p = filepath.Dir(p)
	}
}

// checkRootsAlone says why root may not take path into a kernelspec every
// user runs, or nil: the rule of CheckSystemWide but that others need not
// read or run it. It is for what root reads and copies (a wrapped
// kernel.json, its directory) and for what a kernelspec names besides its
// programs (a directory on PYTHONPATH). path need not exist: then the
// nearest directory above it that does is checked (whoever can write
// there can make path).
func checkRootsAlone(path string) error {
	p, err := nearestExisting(path)
	if err != nil {
		return err
	}
	return checkPath(p, false)
}

// nearestExisting is path if it exists, else the nearest directory above
// it that does (whoever can write there can make path).
func nearestExisting(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%s is not an absolute path", path)
	}
	p := filepath.Clean(path)
	for p != "/" {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		p = filepath.Dir(p)
	}
	return p, nil
}

// checkPath is CheckSystemWide, whose last checks (others may enter the
// directories and run the file) only apply when run is set.
func checkPath(path string, run bool) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s is not an absolute path", path)
	}
	if err := checkChain(filepath.Clean(path), "/", run); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	if real != filepath.Clean(path) {
		if err := checkChain(real, "/", run); err != nil {
			return fmt.Errorf("%s → %w", path, err)
		}
	}
	return nil
}

// checkChain checks path and each directory above it up to top, as they
// are (a link is judged as the link: only its directory's owner can
// replace it); with run, also that others may enter the directories and
// run the file.
func checkChain(path, top string, run bool) error {
	p := path
	for {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if err := rootsAlone(p, fi); err != nil {
			return err
		}
		mode := fi.Mode()
		switch {
		case !run || mode&os.ModeSymlink != 0:
		case mode.IsDir() && mode.Perm()&0o001 == 0:
			return fmt.Errorf("%s cannot be entered by other users (mode %s)", p, rootfile.Octal(mode))
		case p == path && !mode.IsDir() && mode.Perm()&0o001 == 0:
			return fmt.Errorf("%s cannot be run by other users (mode %s)", p, rootfile.Octal(mode))
		}
		if p == top || p == "/" {
			return nil
		}
		p = filepath.Dir(p)
	}
}

// rootsAlone says why p (whose lstat is fi) is not root's alone: another
// owner, or group or others may write it. A link is only judged by its
// owner (its mode means nothing).
func rootsAlone(p string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	mode := fi.Mode()
	switch {
	case !ok:
		return fmt.Errorf("%s: no owner to check", p)
	case mode&os.ModeSymlink != 0 && st.Uid != 0:
		return fmt.Errorf("%s is a link owned by %s, not root", p, owner(st.Uid))
	case st.Uid != 0:
		return fmt.Errorf("%s is owned by %s, not root: that user could change what every user runs", p, owner(st.Uid))
	case mode&os.ModeSymlink == 0 && mode.Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by %s (mode %s): they could change what every user runs",
			p, writers(mode), rootfile.Octal(mode))
	}
	return nil
}

// owner is "uid N (name)", or "uid N" for a uid without a name.
func owner(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return "uid " + id + " (" + u.Username + ")"
	}
	return "uid " + id
}

func writers(m os.FileMode) string { return rootfile.Writers(m) }
