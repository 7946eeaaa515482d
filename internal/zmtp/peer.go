package zmtp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// A peer is who is at the other end of an accepted connection, as far as
// the host can tell: the uid that made the socket (SO_PEERCRED on a unix
// socket; on TCP from this host, the owner of the peer's socket as the
// kernel's sock_diag reports it), else the peer's address for a remote
// client, else nothing (the connection is a peer of its own). Budgets are
// shared fairly between peers, a routing identity stays with the peer that
// held it, and only the kernel's owner may hold iopub's writer up
// (docs/security.md#keyless-peers).
type peer struct {
	key string // "uid:1000", "addr:10.0.0.5", or "conn:N"
	uid int    // -1 when unknown
}

var connSeq atomic.Int64

// peerOf finds out who is at the other end of nc.
func peerOf(nc net.Conn) peer {
	if uid, err := PeerUID(nc); err == nil {
		return peer{key: "uid:" + strconv.Itoa(uid), uid: uid}
	}
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		return peer{key: "addr:" + a.IP.String(), uid: -1}
	}
	return peer{key: "conn:" + strconv.FormatInt(connSeq.Add(1), 10), uid: -1}
}

// ErrPeerUnknown: the owner of a connection's other end cannot be found
// (a remote TCP peer, or a kernel without sock_diag).
var ErrPeerUnknown = errors.New("the owner of the other end is unknown")

// PeerUID returns the uid owning the other end of nc: SO_PEERCRED for a
// unix socket, sock_diag's answer for a TCP connection whose other end is
// a socket on this host (in this network namespace).
func PeerUID(nc net.Conn) (int, error) {
	switch nc := nc.(type) {
	case *net.UnixConn:
		return unixPeerUID(nc)
	case *net.TCPConn:
		l, lok := nc.LocalAddr().(*net.TCPAddr)
		r, rok := nc.RemoteAddr().(*net.TCPAddr)
		if !lok || !rok {
			return -1, ErrPeerUnknown
		}
		// The peer's socket: its source is our remote end, its
		// destination our local one.
		return tcpSocketUID(r, l)
	case interface{ NetConn() net.Conn }:
		return PeerUID(nc.NetConn())
	}
	return -1, ErrPeerUnknown
}

func unixPeerUID(nc *net.UnixConn) (int, error) {
	rc, err := nc.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

// sock_diag (linux/inet_diag.h): one exact lookup, not a dump.
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	inetDiagReqLen   = 56 // struct inet_diag_req_v2
	inetDiagUIDAt    = 64 // offset of idiag_uid in struct inet_diag_msg
)

// tcpSocketUID asks the kernel (NETLINK_SOCK_DIAG) for the owner of the TCP
// socket whose local end is src and remote end dst. An IPv4 pair is tried
// as IPv4 and then as IPv4-mapped IPv6 (a socket bound to [::]).
func tcpSocketUID(src, dst *net.TCPAddr) (int, error) {
	fams := []uint8{unix.AF_INET6}
	if src.IP.To4() != nil && dst.IP.To4() != nil {
		fams = []uint8{unix.AF_INET, unix.AF_INET6}
	}
	var last error = ErrPeerUnknown
	for _, fam := range fams {
		uid, err := sockDiag(fam, src, dst)
		if err == nil {
			return uid, nil
		}
		last = err
	}
	return -1, last
}

func sockDiag(family uint8, src, dst *net.TCPAddr) (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	// The kernel answers at once; a bound keeps a surprise from hanging the
	// accept loop.
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1})

	ne := binary.NativeEndian
	msg := make([]byte, unix.NLMSG_HDRLEN+inetDiagReqLen)
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], sockDiagByFamily)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], 1) // seq
	req := msg[unix.NLMSG_HDRLEN:]
	req[0], req[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(req[4:], 0xffffffff) // every state
	binary.BigEndian.PutUint16(req[8:], uint16(src.Port))
	binary.BigEndian.PutUint16(req[10:], uint16(dst.Port))
	if !putDiagAddr(req[12:28], family, src.IP) || !putDiagAddr(req[28:44], family, dst.IP) {
		return -1, ErrPeerUnknown
	}
	ne.PutUint32(req[48:], 0xffffffff) // INET_DIAG_NOCOOKIE
	ne.PutUint32(req[52:], 0xffffffff)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return -1, fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return -1, fmt.Errorf("sock_diag: %w", err)
	}
	buf = buf[:n]
	if len(buf) < unix.NLMSG_HDRLEN {
		return -1, ErrPeerUnknown
	}
	switch typ := ne.Uint16(buf[4:]); typ {
	case unix.NLMSG_ERROR:
		if len(buf) >= unix.NLMSG_HDRLEN+4 {
			if e := -int32(ne.Uint32(buf[unix.NLMSG_HDRLEN:])); e > 0 {
				return -1, fmt.Errorf("sock_diag: %w", syscall.Errno(e))
			}
		}
		return -1, ErrPeerUnknown
	case sockDiagByFamily:
		body := buf[unix.NLMSG_HDRLEN:]
		if len(body) < inetDiagUIDAt+4 {
			return -1, ErrPeerUnknown
		}
		return int(ne.Uint32(body[inetDiagUIDAt:])), nil
	}
	return -1, ErrPeerUnknown
}

// putDiagAddr writes ip as sock_diag wants it for family.
func putDiagAddr(dst []byte, family uint8, ip net.IP) bool {
	if family == unix.AF_INET {
		v4 := ip.To4()
		if v4 == nil {
			return false
		}
		copy(dst, v4)
		return true
	}
	v6 := ip.To16()
	if v6 == nil {
		return false
	}
	copy(dst, v6)
	return true
}
