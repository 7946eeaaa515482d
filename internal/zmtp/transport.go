package zmtp

import (
	"bufio"
	"context"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// Dialed connections (the relay's inner sockets, to the kernel) use a
// transport of ours too, registered once under these names: the kernel is
// trusted, so their reads are not guarded, but their writes queue like
// every other (see conn) and are written with writev.
const (
	schemeDialTCP = "tfgpu-dial-tcp"
	schemeDialIPC = "tfgpu-dial-ipc"
)

var registerDial sync.Once

// DialEndpoint returns the zmq4 endpoint through which a socket dials a
// Jupyter endpoint ("tcp://127.0.0.1:5555", "ipc://path-1") with our
// transport.
func DialEndpoint(ep string) string {
	registerDial.Do(func() {
		for scheme, network := range map[string]string{schemeDialTCP: "tcp", schemeDialIPC: "unix"} {
			if err := zmq4.RegisterTransport(scheme, dialTransport{network}); err != nil {
				panic(err) // only a second registration of the same name fails
			}
		}
	})
	scheme, addr, ok := cutScheme(ep)
	switch {
	case ok && scheme == "tcp":
		return schemeDialTCP + "://" + addr
	case ok && scheme == "ipc":
		return schemeDialIPC + "://" + addr
	}
	return ep
}

type dialTransport struct{ network string }

// dialShared is the Shared of dialed conns: default limits, no totals
// (they are not peers' connections).
var dialShared = NewShared(Limits{}, nil)

func (t dialTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	nc, err := d.DialContext(ctx, t.network, addr)
	if err != nil {
		return nil, err
	}
	return newConn(nc, bufio.NewReaderSize(nc, 64<<10), dialShared), nil
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

// drainSettle is how long Drain waits at least. zmq4's PUB socket queues a
// message and a goroutine of its own hands it to the connections later, so
// a message just published may not have reached any connection yet when
// the first check finds them all idle: under load a cell's death notice on
// iopub was lost that way while its execute_reply (ROUTER, handed over at
// once) arrived.
const drainSettle = 50 * time.Millisecond

// Drain waits, at least drainSettle and at most max, until every
// connection of doors has written what was queued on it: the last replies
// before the supervisor exits.
func Drain(max time.Duration, doors ...*Door) {
	start := time.Now()
	deadline := start.Add(max)
	for time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
		if time.Since(start) < drainSettle {
			continue
		}
		busy := false
		for _, d := range doors {
			if d != nil && d.Pending() {
				busy = true
				break
			}
		}
		if !busy {
			return
		}
	}
}
