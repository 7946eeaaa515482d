package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// The Door itself: its type, Bind and the zmq4 transport it listens
// through, Accept, Close and what it reports (Addr, Conns). Send is in
// send.go; admission and the handshake in admit.go; routing identities
// and slots in ids.go; iopub's hold and subscriptions in iopub.go.

// A Door is the listening side of one of the sockets Jupyter's clients
// connect to. It is a zmq4 transport (registered under a name of its own,
// see Bind) whose listener hands zmq4 only connections that have completed
// the ZMTP handshake with it, each checked on a goroutine of its own under
// a deadline, and whose reads it guards from then on (see inbound).
//
// zmq4 v0.17.0 would otherwise do the handshake inside its one accept loop
// (a peer that sends nothing blocks every later client), parse a peer's
// READY with unchecked lengths (a panic), allocate whatever size a frame
// header declares (a panic), spin on accept errors, and send a ROUTER
// reply to every connection that claims the addressee's identity.
type Door struct {
	name       string // the channel, for logs
	socketType string // "ROUTER" or "PUB"
	sh         *Shared
	hold       bool // iopub: a lagging reader holds the writer up (Limits.QueueLimit)

	ln    net.Listener
	ready chan *conn // handshaken, for zmq4's Accept
	done  chan struct{}

	mu       sync.Mutex
	closed   bool
	conns    map[*conn]struct{}      // established
	shaking  map[net.Conn]*shakeInfo // in handshake
	ids      map[string]*conn        // ROUTER: routing identity (slotID) → its connection
	reserved map[string]reservation  // ROUTER: identities kept for their holder's reconnect
	holders  map[string]holder       // ROUTER: claimed identity → its peer and connections
	anySlot  bool                    // ROUTER: Send falls back to another slot (RouteToAnySlot)
	heldN    int                     // connections holding the writer up now (hold)
	heldFree chan struct{}           // closed when heldN drops to 0

	sendMu sync.Mutex // serialises Send
	fan    []*conn    // Send's snapshot of conns, under sendMu

	// PUB: how many connections subscribe to each topic, and who is told
	// when a topic gains its first subscriber (OnSubscribe).
	topics      map[string]int
	onSubscribe func(topic []byte)
}

var doorSeq atomic.Int64

// Bind makes a zmq4 socket of type socketType ("ROUTER" or "PUB") listen on
// a Jupyter endpoint ("tcp://127.0.0.1:5555", "ipc:///path") through a new
// Door, and returns the door. hold is for iopub (see Door).
func Bind(sock zmq4.Socket, socketType, name, endpoint string, sh *Shared, hold bool) (*Door, error) {
	scheme, addr, ok := cutScheme(endpoint)
	if !ok || (scheme != "tcp" && scheme != "ipc") {
		return nil, fmt.Errorf("unsupported endpoint %q", endpoint)
	}
	d := &Door{name: name, socketType: socketType, sh: sh, hold: hold,
		ready: make(chan *conn, 64), done: make(chan struct{}),
		conns: map[*conn]struct{}{}, shaking: map[net.Conn]*shakeInfo{}, ids: map[string]*conn{},
		reserved: map[string]reservation{}, holders: map[string]holder{}}
	if socketType == "ROUTER" {
		sh.adopt(d) // what Keep left for this socket, before the first claim
	}
	reg := fmt.Sprintf("tfgpu-door%d-%s", doorSeq.Add(1), scheme)
	if err := zmq4.RegisterTransport(reg, doorTransport{d, netOf(scheme)}); err != nil {
		sh.disown(d)
		return nil, err
	}
	if err := sock.Listen(reg + "://" + addr); err != nil {
		sh.disown(d)
		return nil, err
	}
	return d, nil
}

func cutScheme(ep string) (scheme, addr string, ok bool) {
	for i := 0; i+3 <= len(ep); i++ {
		if ep[i:i+3] == "://" {
			return ep[:i], ep[i+3:], true
		}
	}
	return "", "", false
}

func netOf(scheme string) string {
	if scheme == "ipc" {
		return "unix"
	}
	return "tcp"
}

// doorTransport is the zmq4 transport behind one Door.
type doorTransport struct {
	d       *Door
	network string
}

func (t doorTransport) Dial(context.Context, transport.Dialer, string) (net.Conn, error) {
	return nil, errors.New("zmtp: a door only listens")
}

func (t doorTransport) Listen(_ context.Context, addr string) (net.Listener, error) {
	if t.network == "unix" {
		removeStaleSocket(addr)
	}
	ln, err := net.Listen(t.network, addr)
	if err != nil {
		return nil, err
	}
	t.d.ln = ln
	go t.d.acceptLoop()
	return t.d, nil
}

func (t doorTransport) Addr(ep string) (string, error) { return endpointAddr(t.network, ep) }

// Accept hands zmq4 the next handshaken connection.
func (d *Door) Accept() (net.Conn, error) {
	select {
	case c := <-d.ready:
		return c, nil
	case <-d.done:
		// zmq4's accept loop retries at once on an error; its socket's
		// context is canceled before its listener is closed, so this is
		// reached only in a race, but never let it spin.
		time.Sleep(10 * time.Millisecond)
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every connection of the door.
func (d *Door) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.sh.disown(d)
	var err error
	if d.ln != nil {
		err = d.ln.Close()
	}
	var all []*conn
	for c := range d.conns {
		all = append(all, c)
	}
	for nc := range d.shaking {
		_ = nc.Close()
	}
	d.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
	return err
}

// Addr is the listening address.
func (d *Door) Addr() net.Addr { return d.ln.Addr() }

// Conns returns how many connections the door has: established and in
// handshake.
func (d *Door) Conns() (established, handshaking int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns), len(d.shaking)
}

// removeStaleSocket unlinks a socket file left by a process that was
// SIGKILLed, as libzmq does before binding. Only a socket is removed.
func removeStaleSocket(path string) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
}
