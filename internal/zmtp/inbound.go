package zmtp

import (
	"bufio"
	"errors"
	"io"
)

// inbound reads what a client sends after its handshake, once, into whole
// messages for [Door.Recv]:
//
//   - every frame header is parsed and held against the limits before a
//     byte of the frame is allocated;
//   - frames larger than stageAbove are read into chunks that grow with
//     what actually arrives, so a declared size costs nothing until the
//     bytes are there (readBody);
//   - ZMTP commands are handled here: PING answered, PONG checked and
//     dropped, SUBSCRIBE/CANCEL applied (iopub), anything else closes the
//     connection;
//   - on iopub (pub) no message is returned: subscriptions are applied
//     here and everything else a subscriber sends is read and dropped,
//     so no reader ever blocks on it.
//
// On a CURVE connection the frames come from an opener, each read whole
// and opened before it is checked as a NULL client's are.
type inbound struct {
	rd     *bufio.Reader // the connection
	open   *opener       // CURVE: frames are read and opened here
	pub    bool
	lim    *Limits
	budget *Shared   // the receive budget; nil in tests of the reader alone
	acct   *recvAcct // this connection's part of it
	prog   *progress // the unfinished message's deadline; nil in tests of the reader alone
	hooks  inboundHooks

	msgSize int64 // bytes the current message declared so far
	held    int64 // bytes of it counted in the shared receive budget
	frames  int
}

type inboundHooks struct {
	ping      func(context []byte)
	subscribe func(topic []byte, on bool) error
}

// next reads the peer's next message and returns its frames, after room
// for lead frames of the caller's in front. What the message holds of the
// receive budget stays counted until done. On iopub it returns only an
// error.
func (in *inbound) next(lead int) ([][]byte, error) {
	var msg [][]byte
	for {
		if in.frames == 0 && in.prog != nil {
			in.prog.end() // between messages: an idle client is fine
		}
		flags, size, err := in.header()
		if err != nil {
			return nil, in.fail(err)
		}
		if flags&FlagCommand != 0 {
			if in.frames > 0 {
				return nil, in.fail(protoErr("command inside a message"))
			}
			if err := in.command(size); err != nil {
				return nil, in.fail(err)
			}
			continue
		}
		if err := in.account(size); err != nil {
			return nil, in.fail(err)
		}
		if in.prog != nil {
			in.prog.open(int64(size))
		}
		more := flags&FlagMore != 0
		if in.pub {
			if err := in.fromSubscriber(size, more); err != nil {
				return nil, in.fail(err)
			}
			if !more {
				in.done()
			}
			continue
		}
		body, err := in.body(size)
		if err != nil {
			return nil, in.fail(err)
		}
		if msg == nil {
			msg = make([][]byte, lead, lead+6) // a Jupyter message: delimiter, HMAC, four parts
		}
		msg = append(msg, body)
		if !more {
			if in.prog != nil {
				in.prog.end()
			}
			return msg, nil
		}
	}
}

// fail ends the message in progress: what it held of the budget is given
// back.
func (in *inbound) fail(err error) error {
	in.done()
	return err
}

// done gives back what the message read last took of the budget: the
// relay holds it now.
func (in *inbound) done() {
	if in.budget != nil && in.held > 0 {
		in.budget.give(in.acct, in.held)
	}
	in.msgSize, in.held, in.frames = 0, 0, 0
	if in.open != nil {
		in.open.payload = nil
	}
}

// hold counts n more bytes of the message in progress in the receive
// budget all peers share (see recv.go), before they are allocated. A
// declared size alone costs nothing, so a peer that announces a huge
// frame and stalls holds no one else's room.
func (in *inbound) hold(n int64) error {
	if in.budget == nil {
		return nil
	}
	in.held += n
	return in.budget.take(in.acct, n)
}

// header reads the next frame's header: from the connection, or on CURVE
// the opened frame's (its body is read with it).
func (in *inbound) header() (flags byte, size uint64, err error) {
	if in.open != nil {
		return in.open.next(in.hold)
	}
	h, _, err := peekHeader(in.rd)
	if err != nil {
		return 0, 0, err
	}
	_, _ = in.rd.Discard(h.Len)
	return h.Flags, h.Size, nil
}

// body reads the body of the frame whose header came last.
func (in *inbound) body(size uint64) ([]byte, error) {
	if in.open != nil {
		b := in.open.payload
		in.open.payload = nil
		return b, nil
	}
	return readBody(in.rd, size, in.hold)
}

// skip drops the body of the frame whose header came last, unread where
// it can be.
func (in *inbound) skip(size uint64) error {
	if in.open != nil {
		in.open.payload = nil
		return nil
	}
	if _, err := in.rd.Discard(int(size)); err != nil { // size ≤ MaxMessage < 2^63
		return unexpected(err)
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
func (in *inbound) command(size uint64) error {
	if size > maxCommand {
		return protoErr("command of %d bytes", size)
	}
	body, err := in.body(size)
	if err != nil {
		return err
	}
	in.done() // a command is not a message: nothing of it stays counted
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
// else is dropped.
func (in *inbound) fromSubscriber(size uint64, more bool) error {
	if in.frames != 1 || more || size == 0 {
		return in.skip(size)
	}
	if in.open == nil {
		b, err := in.rd.Peek(1)
		if err != nil {
			return unexpected(err)
		}
		if b[0] > 1 {
			return in.skip(size)
		}
	}
	if size > uint64(1+in.lim.MaxTopic) {
		if in.open != nil && in.open.payload[0] > 1 {
			return in.skip(size)
		}
		return protoErr("subscription of %d bytes", size)
	}
	body, err := in.body(size)
	if err != nil {
		return err
	}
	switch body[0] {
	case 1:
		return in.subscribe(body[1:], true)
	case 0:
		return in.subscribe(body[1:], false)
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
	return err.Error()
}
