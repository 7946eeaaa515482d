package record

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A Dir is an open state directory. Everything in it is read and
// written relative to the handle, never through a symbolic link, and only
// files owned by the directory's owner are read: another local user who
// made the directory first, or planted a file or link in it, gets nothing
// done (docs/security.md).
type Dir struct {
	path string
	f    *os.File
	uid  int // the directory's owner; every file read must be his too
}

// maxStateFile bounds what is read of one file: records are a few hundred
// bytes, GPU handoffs a few KiB.
const maxStateFile = 1 << 20

// ErrUnsafeStateDir is wrapped by the errors of a state directory that is
// not its user's own (owner or mode), or is a link.
var ErrUnsafeStateDir = errors.New("unsafe state directory")

// OpenDir opens dir, creating it (mode 0700, parents too) when create
// is set and it does not exist. It must be a directory, not a link, with
// no permission for group or others, owned by the effective user, or, for
// root with anyOwner, by anyone (root reading users' records then acts only
// on what that user owns).
func OpenDir(dir string, create, anyOwner bool) (*Dir, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("state directory %q: not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if create {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return nil, fmt.Errorf("state directory %s: %w", dir, err)
		}
		if err := unix.Mkdir(dir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("state directory %s: %w", dir, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		var st unix.Stat_t
		if errors.Is(err, unix.EACCES) && unix.Lstat(dir, &st) == nil && int(st.Uid) != os.Geteuid() {
			return nil, fmt.Errorf("state directory %s belongs to uid %d, not to you (uid %d): refusing it; choose your own with --state-dir: %w",
				dir, st.Uid, os.Geteuid(), ErrUnsafeStateDir)
		}
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("state directory %s is a link or not a directory: refusing it: %w", dir, ErrUnsafeStateDir)
		}
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	euid := os.Geteuid()
	switch {
	case int(st.Uid) != euid && !(anyOwner && euid == 0):
		f.Close()
		return nil, fmt.Errorf("state directory %s belongs to uid %d, not to you (uid %d): refusing it; remove it, or choose another with --state-dir: %w",
			dir, st.Uid, euid, ErrUnsafeStateDir)
	case st.Mode&0o077 != 0:
		f.Close()
		return nil, fmt.Errorf("state directory %s has mode %#o; it must be 0700 (chmod 700 %s): %w",
			dir, st.Mode&0o777, dir, ErrUnsafeStateDir)
	}
	return &Dir{path: dir, f: f, uid: int(st.Uid)}, nil
}

// Close closes the directory's handle.
func (d *Dir) Close() error { return d.f.Close() }

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

func (d *Dir) fd() int { return int(d.f.Fd()) }

// validName is the shape of every file name the supervisor writes: no
// separators, no leading dot (temporary files), nothing a terminal would
// interpret.
func validName(name string) bool {
	if name == "" || len(name) > 200 || name[0] == '.' {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return !strings.Contains(name, "..")
}

// read returns the content of name: a regular file, not a link, owned by
// the directory's owner, of at most maxStateFile bytes.
func (d *Dir) read(name string) ([]byte, error) {
	if !validName(name) {
		return nil, fmt.Errorf("%s: not a name the supervisor writes", name)
	}
	fd, err := unix.Openat(d.fd(), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, errors.New("a symbolic link")
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(d.path, name), Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.path, name))
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, errors.New("not a regular file")
	case int(st.Uid) != d.uid:
		return nil, fmt.Errorf("owned by uid %d, not by the directory's owner %d", st.Uid, d.uid)
	}
	return io.ReadAll(io.LimitReader(f, maxStateFile))
}

// write replaces name with data atomically: a new temporary file (0600,
// never an existing one), then rename over name, which replaces a link
// rather than follows it.
func (d *Dir) write(name string, data []byte) error {
	f, err := d.create(name, data)
	if err != nil {
		return err
	}
	return f.Close()
}

// create is write that returns the new file, open for reading and
// writing.
func (d *Dir) create(name string, data []byte) (*os.File, error) {
	if !validName(name) {
		return nil, fmt.Errorf("%s: not a name the supervisor writes", name)
	}
	var tmp string
	var fd int
	var err error
	for range 100 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		tmp = fmt.Sprintf(".%s-%x", name, b)
		fd, err = unix.Openat(d.fd(), tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", filepath.Join(d.path, name), err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.path, name))
	_, err = f.Write(data)
	if err == nil {
		err = unix.Renameat(d.fd(), tmp, d.fd(), name)
	}
	if err != nil {
		f.Close()
		_ = unix.Unlinkat(d.fd(), tmp, 0)
		return nil, fmt.Errorf("write %s: %w", filepath.Join(d.path, name), err)
	}
	return f, nil
}

// remove unlinks name (a link itself, never what it points to).
func (d *Dir) remove(name string) error {
	if !validName(name) {
		return fmt.Errorf("%s: not a name the supervisor writes", name)
	}
	if err := unix.Unlinkat(d.fd(), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// names lists the directory's entries with the given suffix.
func (d *Dir) names(suffix string) ([]string, error) { return d.namesUpTo(suffix, -1) }

// namesUpTo lists at most max (all: max < 0) of the directory's entries
// with the given suffix, reading no further than it needs.
func (d *Dir) namesUpTo(suffix string, max int) ([]string, error) {
	dup, err := unix.Openat(d.fd(), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), d.path)
	defer f.Close()
	var out []string
	for max < 0 || len(out) < max {
		batch, err := f.Readdirnames(256)
		for _, n := range batch {
			if strings.HasSuffix(n, suffix) && validName(n) && (max < 0 || len(out) < max) {
				out = append(out, n)
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
