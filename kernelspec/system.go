package kernelspec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

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

// CheckSystemWide says why path may not be named in a kernelspec that
// every user's Jupyter runs (Dest System), or nil. Every user would run
// that program as themselves, so nobody but root may be able to change
// it: the file and every directory above it (as written, and again
// through its links) must be root's and writable by no one else. And
// every user must be able to run it: the directories searchable and the
// file executable by others. The check is done before the program is ever
// run, so root never runs a program a user could have written.
func CheckSystemWide(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s is not an absolute path", path)
	}
	if err := checkChain(filepath.Clean(path), "/"); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	if real != filepath.Clean(path) {
		if err := checkChain(real, "/"); err != nil {
			return fmt.Errorf("%s → %w", path, err)
		}
	}
	return nil
}

// checkChain checks path and each directory above it up to top, as they
// are (a link is judged as the link: only its directory's owner can
// replace it).
func checkChain(path, top string) error {
	p := path
	for {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner to check", p)
		}
		mode := fi.Mode()
		switch {
		case mode&os.ModeSymlink != 0:
			if st.Uid != 0 {
				return fmt.Errorf("%s is a link owned by uid %d, not root", p, st.Uid)
			}
		case st.Uid != 0:
			return fmt.Errorf("%s is owned by uid %d, not root: that user could change what every user runs", p, st.Uid)
		case mode.Perm()&0o022 != 0:
			return fmt.Errorf("%s is writable by %s (mode %04o): they could change what every user runs",
				p, writers(mode), mode.Perm())
		case mode.IsDir() && mode.Perm()&0o001 == 0:
			return fmt.Errorf("%s cannot be entered by other users (mode %04o)", p, mode.Perm())
		case p == path && !mode.IsDir() && mode.Perm()&0o001 == 0:
			return fmt.Errorf("%s cannot be run by other users (mode %04o)", p, mode.Perm())
		}
		if p == top || p == "/" {
			return nil
		}
		p = filepath.Dir(p)
	}
}

func writers(m os.FileMode) string { return rootfile.Writers(m) }
