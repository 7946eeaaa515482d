package wrapper

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// innerConnName is the inner connection file's name inside its directory.
const innerConnName = "kernel.json"

// substituteConn replaces every argument naming Jupyter's connection file
// with the inner one (docs/design.md#start).
func substituteConn(argv []string, conn, inner string) []string {
	abs, _ := filepath.Abs(conn)
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == conn || (abs != "" && a == abs) {
			a = inner
		}
		out[i] = a
	}
	return out
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)+1] == key+"=" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// maxIPCPath keeps ipc paths under sun_path's 108 bytes with room for the
// "-N" port suffix.
const maxIPCPath = 100

// ErrPlaintextInner means the kernel's own sockets would be TCP ports on
// 127.0.0.1, plain text to every local user, while Jupyter asked for
// CurveZMQ: refused rather than done (docs/design.md#transport-encryption).
var ErrPlaintextInner = errors.New("the connection file asks for CurveZMQ, and the kernel's own ports would carry its traffic in plain text on 127.0.0.1")

// shortTmp is the last base tried: /tmp (a variable for the tests).
var shortTmp = "/tmp"

// innerBases are where the private directory may go, in order: the user's
// runtime directory, TMPDIR, and /tmp, whose short path keeps an ipc socket
// possible when the others are too long for sun_path.
func innerBases() []string {
	var bases []string
	for _, b := range []string{os.Getenv("XDG_RUNTIME_DIR"), os.TempDir(), shortTmp} {
		if fi, err := os.Stat(b); b == "" || err != nil || !fi.IsDir() || slices.Contains(bases, b) {
			continue
		}
		bases = append(bases, b)
	}
	return bases
}

// writeInner creates the private directory (0700) and the inner connection
// file (0600, same key and scheme as Jupyter's, so frames pass untouched).
// Endpoints are ipc sockets in that directory, reachable only by this user,
// in the first base whose path is short enough for a unix socket; tcp
// ports on 127.0.0.1 only when tcp is asked for, or (auto) when no base is
// short enough. With curve (Jupyter's connection file has CurveZMQ keys)
// there is never a tcp inner transport: ErrPlaintextInner instead.
func writeInner(ci *jmsg.ConnInfo, id, transport string, curve bool) (*jmsg.ConnInfo, string, error) {
	if transport == "tcp" && curve {
		return nil, "", fmt.Errorf("--inner-transport tcp: %w; use ipc or auto", ErrPlaintextInner)
	}
	var dir string
	for _, base := range innerBases() {
		d, err := os.MkdirTemp(base, "tfgpu-"+record.ShortID(id)+"-")
		if err != nil {
			continue
		}
		if transport == "tcp" || len(filepath.Join(d, "k")) <= maxIPCPath {
			dir = d
			break
		}
		os.Remove(d) // too long for a socket here; the next base may do
	}
	useTCP := transport == "tcp"
	if dir == "" {
		// No base short enough for a socket (or none writable).
		if transport == "ipc" || curve {
			why := "no private directory short enough for a unix socket in " + strings.Join(innerBases(), ", ")
			if curve {
				return nil, "", fmt.Errorf("%s: %w; set TMPDIR to a short directory", why, ErrPlaintextInner)
			}
			return nil, "", fmt.Errorf("--inner-transport ipc: %s; set TMPDIR to a short directory", why)
		}
		d, err := os.MkdirTemp("", "tfgpu-"+record.ShortID(id)+"-")
		if err != nil {
			return nil, "", fmt.Errorf("create inner directory: %w", err)
		}
		dir, useTCP = d, true
	}
	inner := *ci
	inner.Extra = nil
	if useTCP {
		inner.Transport, inner.IP = "tcp", "127.0.0.1"
		ports, err := freePorts()
		if err != nil {
			os.RemoveAll(dir)
			return nil, "", err
		}
		inner.Ports = ports
	} else {
		inner.Transport, inner.IP = "ipc", filepath.Join(dir, "k")
		for i := range inner.Ports {
			inner.Ports[i] = i + 1
		}
	}
	if err := jmsg.WriteFile(filepath.Join(dir, innerConnName), &inner); err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("write inner connection file: %w", err)
	}
	return &inner, dir, nil
}

// freePorts asks the kernel for five distinct free loopback ports. They are
// free when returned; ipykernel binds them a moment later (the same race
// jupyter_client accepts when it writes connection files). All n listeners
// stay open until each has its port: closed one by one, the kernel may
// hand the same port out twice (seen: hb_port given iopub_port's).
func freePorts() ([5]int, error) {
	var ports [5]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return ports, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
