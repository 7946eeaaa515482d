// Package zmtp is the ZMTP layer of the relay: the doors every client
// connection passes through, and the queue every connection writes
// through. It exists because the supervisor's sockets face every local
// user of a shared machine, and go-zeromq/zmq4 v0.17.0 trusts its peers
// (docs/local-peers.md has the measurements). The doors are ROUTER and PUB
// sockets of its own; zmq4 is left the supervisor's links to the kernel it
// started (transport.go), where the peer is trusted.
//
// It owns:
//
//   - the wire format as pure functions (wire.go): greeting, frame header,
//     command, READY metadata and PING, each checking every length against
//     what is there before slicing; errors wrap [ErrProtocol];
//   - [Door]: the listening side of one outer socket ([Bind]). It accepts
//     with back-off on errors, caps connections per socket
//     ([Limits].MaxConns, and RLIMIT_NOFILE minus a reserve), and runs each
//     handshake on its own goroutine under [Limits].HandshakeTimeout,
//     evicting the oldest when [Limits].MaxHandshakes are pending;
//   - what a client sends (inbound.go), parsed once into the messages
//     [Door.Recv] returns: frame headers checked against
//     [Limits].MaxMessage and MaxFrames before a byte is allocated; large
//     frames staged as their bytes arrive; a receive budget shared by all
//     connections; ZMTP commands handled there (PING answered, PONG noted,
//     SUBSCRIBE/CANCEL applied); on iopub subscriptions applied and
//     everything else read and dropped;
//   - sending ([Door.Send], [Link.Send], send.go): the relay's messages go
//     straight onto the connections, and are queued there before the send
//     returns, so [Drain] knows what is left; on a [Link] zmq4 does the
//     handshake and reads what the kernel sends;
//   - what is written to a peer (conn.go): never blocking, whole messages
//     queued (large frames by reference, so iopub subscribers share one
//     copy), written with writev, dropped for a stalled peer past
//     [Limits].QueueLimit, the peer disconnected when it stalls while all
//     queues together pass [Limits].TotalQueue; on iopub a lagging reader
//     holds the writer up instead ([Door.WaitRoom]); topics filtered here;
//     what iopub published in its first [ReplayFor] is given to each
//     connection's first subscription, so a client's SUB that comes back
//     after a restart later than its DEALER misses nothing
//     ([Door.SendLive] for what is for the subscribers of now only);
//   - routing identities (ROUTER doors): an identity is its peer's (user's);
//     another peer's claim is refused, also for 30 s after the holder's
//     last connection closed. The holder's own connections may share it,
//     each in a slot of its own that [Door.Recv] gives as its identity, so
//     replies go to the connection that asked ([Door.Send]). Empty identities and
//     those starting with a zero byte get a random one. What the doors
//     know of who owns which identity outlives them (owned.go): [Shared.Owned]
//     reports it, [Shared.OwnedChanged] says when the held ones changed,
//     and [Shared.Keep], called before [Bind], has the next supervisor's
//     doors refuse other peers' claims as the old ones would have, so a
//     restart opens no window to take a client's identity.
//   - CurveZMQ (RFC 26), when [Shared.UseCurve] has the server's key pair
//     (curve.go, curve_conn.go): the handshake on the handshake goroutine,
//     then every frame sealed on its way out, encrypted in the one buffer
//     it is queued in, and opened on its way in, before inbound checks it
//     as it checks a NULL client's.
//
// A peer that breaks a rule loses its connection and nothing else: its
// goroutines end, its descriptor closes, its queue, subscriptions, identity
// and budget are given back. Each kind of rule breaking is logged at most
// once per 10 s, with the peer's address and never a byte of its messages
// beyond a printable command name.
//
// Assumptions: peers speak ZMTP 3.x with the NULL mechanism, or CURVE when
// the doors do (libzmq ≥ 4, pyzmq, zmq4); the door announces ZMTP 3.0, as
// zmq4 does, so libzmq sends subscriptions as messages, but 3.1 commands
// are understood too. Callers
// never modify a frame after sending it (see conn). Dialed connections (to
// the kernel) are trusted: their reads are not checked.
//
// [Bind], [Door.Send], [Link.Send], [Drain], [Shared.Owned] and
// [Shared.OwnedChanged] are safe for concurrent use; a [Shared] is shared
// by the doors of one relay; [Shared.Keep] and [Shared.UseCurve] are for
// before [Bind]. Closing a door or a connection twice is harmless.
package zmtp
