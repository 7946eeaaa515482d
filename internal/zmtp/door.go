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
)

// The Door itself: its type, Bind, Recv, Close and what it reports (Addr,
// Conns). Send is in send.go; admission and the handshake in admit.go;
// what a connection sends in inbound.go; routing identities and slots in
// ids.go; iopub's hold and subscriptions in iopub.go.

// A Door is the listening side of one of the sockets Jupyter's clients
// connect to: a ZMTP ROUTER or PUB of its own, with no zmq4 socket under
// it. Each connection is handshaken on a goroutine of its own under a
// deadline, then read by one more (serve), which parses each byte once
// into the messages Recv returns (see inbound); Send writes them (see
// conn).
//
// zmq4 v0.17.0's ROUTER and PUB would do the handshake inside their one
// accept loop (a peer that sends nothing blocks every later client),
// parse a peer's READY with unchecked lengths (a panic), allocate
// whatever size a frame header declares (a panic), spin on accept
// errors, and send a ROUTER reply to every connection that claims the
// addressee's identity (docs/local-peers.md).
type Door struct {
	name       string // the channel, for logs
	socketType string // "ROUTER" or "PUB"
	sh         *Shared
	hold       bool // iopub: a lagging reader holds the writer up (Limits.QueueLimit)

	ln   net.Listener
	msgs chan [][]byte // ROUTER: the clients' messages, for Recv
	done chan struct{}

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
	// PUB: what was published since the bind, until replayUntil and up to
	// QueueLimit bytes, for each connection's first subscription (replay);
	// under sendMu. replaying is false once the window is over.
	replaying   atomic.Bool
	replayUntil time.Time
	replayed    [][][]byte
	replayBytes int64
}

// Bind listens on a Jupyter endpoint ("tcp://127.0.0.1:5555",
// "ipc:///path", "*" for any interface or port) as a socket of type
// socketType ("ROUTER" or "PUB") through a new Door, and returns the door.
// name is the channel, for logs; hold is for iopub (see Door).
func Bind(socketType, name, endpoint string, sh *Shared, hold bool) (*Door, error) {
	scheme, ep, ok := cutScheme(endpoint)
	if !ok || (scheme != "tcp" && scheme != "ipc") {
		return nil, fmt.Errorf("unsupported endpoint %q", endpoint)
	}
	network := netOf(scheme)
	addr, err := endpointAddr(network, ep)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	d := &Door{name: name, socketType: socketType, sh: sh, hold: hold,
		msgs: make(chan [][]byte), done: make(chan struct{}),
		conns: map[*conn]struct{}{}, shaking: map[net.Conn]*shakeInfo{}, ids: map[string]*conn{},
		reserved: map[string]reservation{}, holders: map[string]holder{}}
	if network == "unix" {
		removeStaleSocket(addr)
	}
	if d.ln, err = net.Listen(network, addr); err != nil {
		return nil, err
	}
	if socketType == "ROUTER" {
		sh.adopt(d) // what Keep left for this socket, before the first claim
	} else {
		d.replayUntil = time.Now().Add(ReplayFor)
		d.replaying.Store(true)
	}
	go d.acceptLoop()
	return d, nil
}

// Recv returns the next message a client sent to a ROUTER door, its first
// frame the routing identity of the connection it came on (what Send
// takes to reply to it). Clients are served in turn: each connection
// hands over one message at a time. Recv fails once the door is closed or
// ctx ends.
func (d *Door) Recv(ctx context.Context) ([][]byte, error) {
	select {
	case m := <-d.msgs:
		return m, nil
	case <-d.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// serve reads c's messages, each parsed once (inbound), and hands them to
// Recv until c closes or breaks a rule. On iopub there are none: inbound
// applies the subscriptions and drops the rest.
func (d *Door) serve(c *conn) {
	rid := []byte(c.identity) // fixed at the handshake; no receiver modifies a frame
	for {
		msg, err := c.in.next(1)
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				d.sh.rl.warn("zmtp: closed a connection that broke the protocol",
					"socket", d.name, "peer", c.RemoteAddr().String(), "why", reason(err))
			}
			c.closeWith(reason(err))
			return
		}
		// Whole now: the receive budget is for messages not yet complete
		// (recv.go); what waits for Recv is one message a connection.
		c.in.done()
		msg[0] = rid
		select {
		case d.msgs <- msg:
		case <-c.gone:
		case <-d.done:
		}
	}
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
