package record

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// at is a path to name inside d that goes through the open handle, never
// through the directory's path again (which another process could have
// replaced): a unix socket's bind and connect take only paths.
func (d *Dir) at(name string) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("state file name %q: %w", Printable(name), ErrRefused)
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.fd(), name), nil
}

// ListenUnix listens on a unix socket named name in d, mode 0600, first
// removing a socket of that name its owner left (a standby that was
// killed). Close removes it again.
func (d *Dir) ListenUnix(name string) (*net.UnixListener, error) {
	path, err := d.at(name)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != d.uid {
			return nil, fmt.Errorf("%s/%s is not a socket of its owner's: %w", d.path, name, ErrRefused)
		}
		if err := unix.Unlinkat(d.fd(), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("remove stale socket %s/%s: %w", d.path, name, err)
		}
	}
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s/%s: %w", d.path, name, err)
	}
	return l, nil
}

// DialUnix connects to the unix socket named name in d, within timeout.
// It is a socket of the directory's owner (not a link, not another user's
// file), or the connection is refused; who listens on it is the caller's to
// check (SO_PEERCRED).
func (d *Dir) DialUnix(name string, timeout time.Duration) (*net.UnixConn, error) {
	path, err := d.at(name)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != d.uid {
		return nil, fmt.Errorf("%s/%s is not a socket of its owner's: %w", d.path, name, ErrRefused)
	}
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// PeerCred is the process, user and group at the other end of a
// connected unix socket, as the kernel recorded them when it connected.
func PeerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}
