package record

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// A record read back from a state directory is a claim, not an order:
// anyone who could write the directory could have written it (a user who
// made it first, an older version's bug). Before `stop`, `ps`, `doctor` or
// the next supervisor act on a field, it is checked against what a
// supervisor of that kernel, run by the directory's owner, would have
// written and made (docs/security.md).

// ErrRefused is wrapped by the errors of a record field that does not
// check out; nothing was done with it.
var ErrRefused = errors.New("refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
}

// kernelIDShape is what jmsg.KernelID gives: the uuid of kernel-<uuid>.json
// or 12 hex digits; any id made only of these characters is accepted.
var kernelIDShape = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ValidKernelID reports whether id has the shape of a kernel id.
func ValidKernelID(id string) bool {
	return kernelIDShape.MatchString(id) && !strings.Contains(id, "..")
}

// BootID is this boot's id: a record of another boot names nothing alive.
var BootID = func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}()

// thisBoot reports whether the record was written since the last boot
// (records without a boot id, of older versions, are taken to be).
func (st State) thisBoot() bool { return st.BootID == "" || st.BootID == BootID }

// owns reports whether pid is the process the record names: started (see
// there) and owned by the record's owner.
func (st State) owns(pid int, start uint64) bool {
	return st.started(pid, start) && proc.Owner(pid) == st.Owner
}

// started reports whether pid is alive with the start time recorded, since
// this boot, whoever owns it. A zombie is not alive: a SIGKILLed
// supervisor is one until its parent reaps it, and its watcher must not
// wait for that.
func (st State) started(pid int, start uint64) bool {
	return st.thisBoot() && aliveSince(pid, start)
}

// aliveSince reports whether pid is a live process (not a zombie) with
// the start time given.
func aliveSince(pid int, start uint64) bool {
	if pid <= 1 {
		return false
	}
	p, err := proc.Read(pid)
	return err == nil && p.Start == start && p.Alive()
}

// Cgroup file systems (statfs(2) f_type).
const (
	cgroup2Magic = 0x63677270
	cgroup1Magic = 0x27e0eb
)

// checkedCgroup returns the record's cgroup when it is one a supervisor of
// this kernel makes: an absolute path without links on a cgroup file
// system, named tfgpu-ID (older versions), tfgpu-ID-PID (v2, v1) or
// tfgpu-ID-PID.scope (systemd) with the supervisor's pid, and owned by the
// record's owner.
func (st State) checkedCgroup() (string, error) {
	dir := st.Cgroup
	if dir == "" {
		return "", nil
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return "", refused("cgroup %q is not a clean absolute path", Printable(dir))
	}
	pid := strconv.Itoa(st.SupervisorPID)
	switch filepath.Base(dir) {
	case "tfgpu-" + st.KernelID, "tfgpu-" + st.KernelID + "-" + pid, cgroup.ScopeUnit(st.KernelID + "-" + pid):
	default:
		return "", refused("cgroup %s is not named as a supervisor of kernel %s names its cgroups", Printable(dir), st.KernelID)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil // gone: nothing to do
		}
		return "", refused("cgroup %s: %v", dir, err)
	}
	if fs.Type != cgroup2Magic && fs.Type != cgroup1Magic {
		return "", refused("cgroup %s is not on a cgroup file system", dir)
	}
	if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir {
		return "", refused("cgroup %s goes through a symbolic link", dir)
	}
	var s unix.Stat_t
	if err := unix.Lstat(dir, &s); err != nil || s.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", refused("cgroup %s is not a directory", dir)
	}
	if int(s.Uid) != st.Owner {
		return "", refused("cgroup %s belongs to uid %d, not to the record's owner %d", dir, s.Uid, st.Owner)
	}
	return dir, nil
}

// checkedInnerDir returns the record's inner directory when it is one a
// supervisor makes (writeInner): tfgpu-SHORTID-DIGITS directly in a
// runtime or temporary directory, a real directory of mode 0700 owned by
// the record's owner.
func (st State) checkedInnerDir() (string, error) {
	dir := st.InnerDir
	if dir == "" {
		return "", nil
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return "", refused("inner directory %q is not a clean absolute path", Printable(dir))
	}
	base, parent := filepath.Base(dir), filepath.Dir(dir)
	digits, ok := strings.CutPrefix(base, "tfgpu-"+ShortID(st.KernelID)+"-")
	if _, err := strconv.ParseUint(digits, 10, 64); !ok || err != nil {
		return "", refused("inner directory %s is not named as a supervisor names it", Printable(dir))
	}
	if parent != filepath.Clean(os.TempDir()) && parent != "/tmp" && parent != "/run/user/"+strconv.Itoa(st.Owner) &&
		parent != filepath.Clean(os.Getenv("XDG_RUNTIME_DIR")) {
		return "", refused("inner directory %s is not in a runtime or temporary directory", dir)
	}
	var s unix.Stat_t
	if err := unix.Lstat(dir, &s); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil
		}
		return "", refused("inner directory %s: %v", dir, err)
	}
	switch {
	case s.Mode&unix.S_IFMT != unix.S_IFDIR:
		return "", refused("inner directory %s is not a directory", dir)
	case int(s.Uid) != st.Owner:
		return "", refused("inner directory %s belongs to uid %d, not to the record's owner %d", dir, s.Uid, st.Owner)
	case s.Mode&0o077 != 0:
		return "", refused("inner directory %s has mode %#o, not 0700", dir, s.Mode&0o777)
	}
	return dir, nil
}

// Printable replaces control characters, which a record could carry to a
// terminal as escape sequences, and the characters that reorder or break
// what a terminal shows (bidirectional overrides such as U+202E, line and
// paragraph separators, other invisible format characters), with "?", and
// cuts what is longer than MaxText bytes, visibly (Cut).
func Printable(s string) string { return cut(printable(s), MaxText) }

func printable(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ") // errors.Join's separator
	return strings.Map(controlToQ, s)
}

// controlToQ maps a control character (C0, DEL, C1), a format character
// (Unicode Cf: bidi controls, zero-width ones), a line or paragraph
// separator (Zl, Zp) to '?', and any other rune to itself, for
// strings.Map (which turns invalid UTF-8 into U+FFFD, itself printable).
func controlToQ(r rune) rune {
	if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) ||
		unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
		return '?'
	}
	return r
}

// ShortID is the first 8 characters of a kernel id, as logs, inner
// directories and ps show it.
func ShortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// validMarker reports whether the record's tree marker is one its
// supervisor made (proc.NewMarker of its kernel id).
func (st State) validMarker() bool {
	rest, ok := strings.CutPrefix(st.Marker, st.KernelID+"/")
	return ok && len(rest) == 16 && strings.Trim(rest, "0123456789abcdef") == ""
}
