package zmtp

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"

	"github.com/go-zeromq/zmq4/transport"
)

// dialTransport is the zmq4 transport of a Link (registered under a name
// of its own, see Link.Endpoint): the kernel is trusted, so the reads of
// dialed conns are not guarded, but their writes queue like every other
// (see conn) and are written with writev.
type dialTransport struct {
	network string
	link    *Link
}

// dialShared is the Shared of dialed conns: default limits, no totals
// (they are not peers' connections).
var dialShared = NewShared(Limits{}, nil)

func (t dialTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	nc, err := d.DialContext(ctx, t.network, addr)
	if err != nil {
		return nil, err
	}
	if err := ownPort(nc); err != nil {
		nc.Close()
		return nil, err
	}
	c := newConn(nc, bufio.NewReaderSize(newRawReader(nc), 64<<10), dialShared)
	c.link = t.link
	c.fw.greeting = GreetingLen // zmq4 opens the connection with one
	return c, nil
}

func (t dialTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, net.UnknownNetworkError("tfgpu-dial: dial only")
}

func (t dialTransport) Addr(ep string) (string, error) { return endpointAddr(t.network, ep) }

// endpointAddr turns the address part of an endpoint into one for
// net.Dial/net.Listen: "*" means every interface or any port.
func endpointAddr(network, ep string) (string, error) {
	if network == "unix" {
		return ep, nil
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return "", err
	}
	if host == "*" || host == "" {
		host = "0.0.0.0"
	}
	if port == "*" {
		port = "0"
	}
	return net.JoinHostPort(host, port), nil
}

// ownPort checks, before anything is sent, that the other end of a dialed
// connection is a socket of this user's: the kernel's port was chosen free
// and bound by the kernel a moment later, and another local user may have
// bound it first (docs/security.md#threats, class 4). A unix socket in the
// supervisor's private directory passes the same check.
func ownPort(nc net.Conn) error {
	uid, err := PeerUID(nc)
	switch {
	case err != nil:
		return fmt.Errorf("cannot tell who holds the kernel's port %s (%v): refusing it; use --inner-transport ipc", nc.RemoteAddr(), err)
	case uid != os.Geteuid():
		return fmt.Errorf("the kernel's port %s is held by uid %d, not by this user: refusing it (another local user bound it first)", nc.RemoteAddr(), uid)
	}
	return nil
}
