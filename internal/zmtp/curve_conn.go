package zmtp

import "bufio"

// How a CURVE connection fits the conn: each frame the conn queues is
// sealed into a MESSAGE of its own (conn.putFrame), and each MESSAGE the
// client sends is opened here, before inbound checks the frame it carries
// as it checks a NULL client's.

// opener reads MESSAGE frames from a CURVE client and opens each into the
// plain frame it carries, for inbound (which then checks it as it checks a
// NULL client's). A MESSAGE frame is read whole before it is opened (its
// MAC covers all of it), staged as its bytes arrive like any large frame
// (readBody), counted in the receive budget through inbound's hold.
type opener struct {
	rd   *bufio.Reader // the connection
	cs   *curveServer
	lim  *Limits
	prog *progress // the unfinished message's deadline; nil in tests

	payload []byte // the body of the frame opened last, until inbound takes it
}

// next reads and opens one MESSAGE frame and returns the plain frame's
// flags and size; its body waits in payload. The outer frame's flags are
// ignored (libzmq sends MESSAGE frames with none): the inner ones count.
func (o *opener) next(hold func(int64) error) (flags byte, size uint64, err error) {
	h, _, err := peekHeader(o.rd)
	if err != nil {
		return 0, 0, err
	}
	_, _ = o.rd.Discard(h.Len)
	if h.Size < messageMin {
		return 0, 0, protoErr("CURVE: a frame of %d bytes is not a MESSAGE", h.Size)
	}
	if h.Size-messageExtra-1 > uint64(o.lim.MaxMessage) {
		return 0, 0, protoErr("message of more than %d bytes (the limit; see --max-message-size)", o.lim.MaxMessage)
	}
	if o.prog != nil {
		o.prog.open(int64(h.Size))
	}
	body, err := readBody(o.rd, h.Size, hold)
	if err != nil {
		return 0, 0, err
	}
	if flags, o.payload, err = o.cs.open(body); err == nil {
		err = checkFlags(flags &^ FlagLong) // the inner flags carry no length
	}
	if err != nil {
		o.payload = nil
		return 0, 0, err
	}
	return flags &^ FlagLong, uint64(len(o.payload)), nil
}
