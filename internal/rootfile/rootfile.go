// Package rootfile is the one rule for what root may load or run: a file
// that no user but root can change. Root loads an NVML library and runs a
// Python or a kernel's program only when the file, as named and with its
// links resolved, and the directory each is in, are root's and writable by
// neither group nor others (docs/security.md#threats-by-class, class 3).
package rootfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// NotRoots says which file of a path another user could change, and how.
type NotRoots struct {
	Path string      // the file or directory that failed
	UID  int         // its owner
	Mode os.FileMode // its permission bits, with setuid, setgid and sticky
}

func (e *NotRoots) Error() string {
	if e.UID != 0 {
		return fmt.Sprintf("%s belongs to uid %d", e.Path, e.UID)
	}
	return fmt.Sprintf("%s is writable by %s (mode %s)", e.Path, Writers(e.Mode), Octal(e.Mode))
}

// Octal is m in octal as chmod(1) takes it and stat(1) shows it: the
// permission bits with the setuid, setgid and sticky bits (/tmp: 1777,
// not 0777).
func Octal(m os.FileMode) string {
	o := uint32(m.Perm())
	for _, b := range []struct {
		mode os.FileMode
		bit  uint32
	}{{os.ModeSetuid, 0o4000}, {os.ModeSetgid, 0o2000}, {os.ModeSticky, 0o1000}} {
		if m&b.mode != 0 {
			o |= b.bit
		}
	}
	return fmt.Sprintf("%04o", o)
}

// modeBits is m's permission bits with setuid, setgid and sticky.
func modeBits(m os.FileMode) os.FileMode {
	return m & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
}

// Check returns nil when abs (an absolute path), its directory, the file
// its links resolve to and that file's directory are all root's and
// writable by neither group nor others; else a *NotRoots, or the error of
// a lookup. A link itself is only checked for its owner (its mode means
// nothing).
func Check(abs string) error {
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	for _, p := range []string{abs, filepath.Dir(abs), real, filepath.Dir(real)} {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case !ok:
			return fmt.Errorf("%s: no owner to check", p)
		case st.Uid != 0:
			return &NotRoots{Path: p, UID: int(st.Uid), Mode: modeBits(fi.Mode())}
		case fi.Mode()&os.ModeSymlink == 0 && fi.Mode().Perm()&0o022 != 0:
			return &NotRoots{Path: p, Mode: modeBits(fi.Mode())}
		}
	}
	return nil
}

// Writers says who besides the owner may write under mode m.
func Writers(m os.FileMode) string {
	var w []string
	if m.Perm()&0o020 != 0 {
		w = append(w, "its group")
	}
	if m.Perm()&0o002 != 0 {
		w = append(w, "everyone")
	}
	return strings.Join(w, " and ")
}
