package zmtp

import (
	"bufio"
	"errors"
	"io"
)

// inbound is the read side of an accepted connection after its handshake.
// zmq4 reads through it; it hands zmq4 only bytes it has checked:
//
//   - every frame header is parsed and held against the limits before
//     zmq4 sees it (zmq4 allocates a frame's declared size at its header,
//     and panics on an absurd one);
//   - frames larger than stageAbove are read whole into a buffer that
//     grows with what actually arrives, so a declared size costs nothing
//     until the bytes are there;
//   - ZMTP commands never reach zmq4: PING is answered, PONG checked and dropped,
//     SUBSCRIBE/CANCEL applied (iopub), anything else closes the
//     connection;
//   - on iopub (pub) no message reaches zmq4: subscriptions are applied
//     here and everything else a subscriber sends is read and dropped,
//     so no reader ever blocks on it.
//
// zmq4 starts with prelude: the canonical greeting and READY it expects
// (the real ones were checked by the handshake).
type inbound struct {
	rd     *bufio.Reader
	pub    bool
	lim    *Limits
	budget *Shared   // the receive budget; nil in tests of the reader alone
	acct   *recvAcct // this connection's part of it
	prog   *progress // the unfinished message's deadline; nil in tests of the reader alone
	hooks  inboundHooks

	pending []byte // checked bytes for zmq4: a prelude or a frame header
	hdr     [9]byte
	body    [][]byte // a staged frame body for zmq4, after pending
	pass    uint64   // body bytes of the current frame zmq4 reads straight from rd
	more    bool     // the current message has more frames
	msgSize int64    // bytes the current message declared so far
	held    int64    // bytes of it counted in the shared receive budget
	frames  int
	err     error
}

type inboundHooks struct {
	ping      func(context []byte)
	subscribe func(topic []byte, on bool) error
}

// errRead wraps every error Read returns so that zmq4 sees a non-timeout
// net.Error and drops the connection (zmq4's checkIO ignores other errors,
// and io.ReadFull turns a bare io.EOF after a partial read into
// io.ErrUnexpectedEOF, which zmq4 would not treat as closed either).
type errRead struct{ err error }

func (e *errRead) Error() string   { return "zmtp read: " + e.err.Error() }
func (e *errRead) Unwrap() error   { return e.err }
func (e *errRead) Timeout() bool   { return false }
func (e *errRead) Temporary() bool { return false }

// Read gives zmq4 the next checked bytes.
func (in *inbound) Read(p []byte) (int, error) {
	for {
		if in.pass == 0 && !in.more && in.prog != nil {
			in.prog.end() // the last frame is zmq4's: no deadline while idle
		}
		switch {
		case len(p) == 0:
			return 0, nil
		case len(in.pending) > 0:
			n := copy(p, in.pending)
			in.pending = in.pending[n:]
			return n, nil
		case len(in.body) > 0:
			n := copy(p, in.body[0])
			if in.body[0] = in.body[0][n:]; len(in.body[0]) == 0 {
				in.body[0] = nil // let the chunk go
				if in.body = in.body[1:]; len(in.body) == 0 {
					in.body = nil
				}
			}
			return n, nil
		case in.pass > 0:
			n, err := in.rd.Read(p[:min(uint64(len(p)), in.pass)])
			in.pass -= uint64(n)
			if n > 0 {
				return n, nil
			}
			if err == nil {
				err = io.ErrNoProgress
			}
			in.fail(err)
			return 0, in.err
		case in.err != nil:
			return 0, in.err
		}
		if err := in.next(); err != nil {
			in.fail(err)
		}
	}
}

func (in *inbound) fail(err error) {
	if in.err == nil {
		in.err = &errRead{err}
		in.pending, in.body, in.pass = nil, nil, 0 // nothing more reaches zmq4
		in.endMessage()
	}
}

// endMessage gives back what the message in progress took of the budget.
func (in *inbound) endMessage() {
	if in.budget != nil && in.held > 0 {
		in.budget.give(in.acct, in.held)
	}
	in.msgSize, in.held, in.frames, in.more = 0, 0, 0, false
}

// hold counts n more bytes of the message in progress in the receive
// budget all peers share (see recv.go): staged chunks as they are
// allocated, or what zmq4 allocates at a header (at most stageAbove). A
// declared size alone costs nothing, so a peer that announces a huge frame
// and stalls holds no one else's room.
func (in *inbound) hold(n int64) error {
	if in.budget == nil {
		return nil
	}
	in.held += n
	return in.budget.take(in.acct, n)
}

// next reads one frame header and deals with the frame: a command is
// handled whole; a message frame is checked and either set up for zmq4 or,
// on iopub, consumed.
func (in *inbound) next() error {
	h, hb, err := peekHeader(in.rd)
	if err != nil {
		return err
	}
	copy(in.hdr[:], hb)
	_, _ = in.rd.Discard(h.Len)
	if h.Command() {
		if in.more {
			return protoErr("command inside a message")
		}
		return in.command(h)
	}
	if err := in.account(h.Size); err != nil {
		return err
	}
	if in.prog != nil {
		in.prog.open(int64(h.Size))
	}
	in.more = h.More()
	if in.pub {
		return in.fromSubscriber(h)
	}
	// The header goes to zmq4 only once the frame is known to be
	// deliverable: zmq4 allocates the size it declares as it reads it.
	if h.Size > stageAbove {
		if in.body, err = readChunks(in.rd, h.Size, in.hold); err != nil {
			return err
		}
	} else {
		if err := in.hold(int64(h.Size)); err != nil {
			return err
		}
		in.pass = h.Size
	}
	in.pending = in.hdr[:h.Len]
	if !in.more {
		in.endMessage() // handed on: zmq4 and the kernel hold it now
	}
	return nil
}

// account checks one more frame of size bytes against the limits.
func (in *inbound) account(size uint64) error {
	in.frames++
	if in.frames > in.lim.MaxFrames {
		return protoErr("message of more than %d frames", in.lim.MaxFrames)
	}
	if size > uint64(in.lim.MaxMessage) || in.msgSize+int64(size) > in.lim.MaxMessage {
		return protoErr("message of more than %d bytes (the limit; see --max-message-size)", in.lim.MaxMessage)
	}
	in.msgSize += int64(size)
	return nil
}

// command handles a command frame after the handshake.
func (in *inbound) command(h FrameHeader) error {
	if h.Size > maxCommand {
		return protoErr("command of %d bytes", h.Size)
	}
	body := make([]byte, h.Size)
	if _, err := io.ReadFull(in.rd, body); err != nil {
		return unexpected(err)
	}
	name, data, err := ParseCommand(body)
	if err != nil {
		return err
	}
	switch name {
	case "PING":
		p, err := ParsePing(data)
		if err != nil {
			return err
		}
		if in.hooks.ping != nil {
			in.hooks.ping(p.Context)
		}
	case "PONG":
		if len(data) > 16 {
			return protoErr("PONG of %d bytes", len(data))
		}
		// The door sends no PINGs; a PONG is checked and dropped.
	case "SUBSCRIBE", "CANCEL": // ZMTP 3.1 subscriptions
		if !in.pub {
			return protoErr("%s on a ROUTER", name)
		}
		return in.subscribe(data, name == "SUBSCRIBE")
	default:
		return protoErr("command %s", printable(name))
	}
	return nil
}

// fromSubscriber handles a message frame an iopub peer sent: a one-frame
// message that starts with 1 or 0 is a ZMTP 3.0 (un)subscription; anything
// else is read and dropped.
func (in *inbound) fromSubscriber(h FrameHeader) error {
	defer func() {
		if !in.more {
			in.endMessage()
		}
	}()
	if in.frames == 1 && !h.More() && h.Size >= 1 {
		if b, err := in.rd.Peek(1); err == nil && b[0] <= 1 && h.Size > uint64(1+in.lim.MaxTopic) {
			return protoErr("subscription of %d bytes", h.Size)
		}
	}
	if in.frames == 1 && !h.More() && h.Size >= 1 && h.Size <= uint64(1+in.lim.MaxTopic) {
		body := make([]byte, h.Size)
		if _, err := io.ReadFull(in.rd, body); err != nil {
			return unexpected(err)
		}
		switch body[0] {
		case 1:
			return in.subscribe(body[1:], true)
		case 0:
			return in.subscribe(body[1:], false)
		}
		return nil
	}
	if _, err := in.rd.Discard(int(h.Size)); err != nil { // Size ≤ MaxMessage < 2^63
		return unexpected(err)
	}
	return nil
}

func (in *inbound) subscribe(topic []byte, on bool) error {
	if len(topic) > in.lim.MaxTopic {
		return protoErr("topic of %d bytes", len(topic))
	}
	if in.hooks.subscribe == nil {
		return nil
	}
	return in.hooks.subscribe(topic, on)
}

// peekHeader parses the frame header at the front of rd, leaving it there
// (h.Len bytes, also returned as hb, valid until rd is read again).
func peekHeader(rd *bufio.Reader) (h FrameHeader, hb []byte, err error) {
	first, err := rd.Peek(1)
	if err != nil {
		return h, nil, err
	}
	if hb, err = rd.Peek(HeaderLen(first[0])); err != nil {
		return h, nil, unexpected(err)
	}
	h, err = ParseFrameHeader(hb)
	return h, hb, err
}

// unexpected turns an EOF in the middle of a frame into ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// reason is a short description of why a read ended, for logs: never
// bytes of the peer's beyond a printable command name.
func reason(err error) string {
	if errors.Is(err, io.EOF) {
		return "closed by the peer"
	}
	var e *errRead
	if errors.As(err, &e) {
		err = e.err
	}
	return err.Error()
}
