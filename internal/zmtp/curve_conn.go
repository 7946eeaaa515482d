package zmtp

import "bufio"

// How a CURVE connection fits the conn: zmq4 and the conn go on writing and
// reading plain ZMTP frames. A sealer, fed everything the conn queues,
// turns each finished frame into a MESSAGE frame; an opener, under the
// inbound reader, turns each MESSAGE frame the client sends back into the
// plain frame it carries, so that inbound checks it like any other.

// sealer follows the plain ZMTP stream the conn queues (zmq4's frames and
// the conn's own PING and PONG commands, always whole frames in order)
// and emits one sealed MESSAGE frame per plain frame. Called with the
// conn's lock held.
type sealer struct {
	cs    *curveServer
	hdr   []byte // header bytes of the frame in progress
	frame []byte // its MESSAGE frame so far (messageFrame); nil in a header
	left  uint64 // body bytes still to come
}

// feed takes the next piece of the plain stream; emit gets each sealed
// frame, a buffer of its own.
func (s *sealer) feed(p []byte, emit func([]byte)) error {
	for len(p) > 0 {
		if s.frame == nil {
			need := 1
			if len(s.hdr) > 0 {
				need = HeaderLen(s.hdr[0])
			}
			n := min(need-len(s.hdr), len(p))
			s.hdr = append(s.hdr, p[:n]...)
			p = p[n:]
			if len(s.hdr) < HeaderLen(s.hdr[0]) {
				continue
			}
			h, err := ParseFrameHeader(s.hdr)
			if err != nil { // our own writers only: a bug, not a peer
				return err
			}
			s.hdr, s.left = s.hdr[:0], h.Size
			s.frame = messageFrame(h.Flags, h.Size)
		} else {
			n := min(uint64(len(p)), s.left)
			s.frame = append(s.frame, p[:n]...)
			p, s.left = p[n:], s.left-n
		}
		if s.frame != nil && s.left == 0 {
			if err := s.cs.sealMessage(s.frame); err != nil {
				return err
			}
			emit(s.frame)
			s.frame = nil
		}
	}
	return nil
}

// opener reads MESSAGE frames from a CURVE client and yields the plain
// ZMTP stream they carry, for inbound (which then checks it as it checks
// a NULL client's). A MESSAGE frame is read whole before it is opened
// (its MAC covers all of it): a large one is staged as its bytes arrive,
// counted in the receive budget all peers share, as inbound stages.
type opener struct {
	rd   *bufio.Reader // the connection
	cs   *curveServer
	lim  *Limits
	sh   *Shared   // receive budget; nil in tests of the opener alone
	acct *recvAcct // the connection's part of it
	prog *progress // the unfinished message's deadline; nil in tests

	hdr     []byte // the plain frame's header, for inbound
	payload []byte // then its body
}

func (o *opener) Read(p []byte) (int, error) {
	for len(o.hdr) == 0 && len(o.payload) == 0 {
		if err := o.next(); err != nil {
			return 0, err
		}
	}
	if len(o.hdr) > 0 {
		n := copy(p, o.hdr)
		o.hdr = o.hdr[n:]
		return n, nil
	}
	n := copy(p, o.payload)
	o.payload = o.payload[n:]
	if len(o.payload) == 0 {
		// Let the opened frame go: an emptied slice still holds its
		// array, a whole staged MESSAGE (up to MaxMessage), uncounted
		// in the receive budget, until the client's next frame.
		o.payload = nil
	}
	return n, nil
}

// next reads and opens one MESSAGE frame. The outer frame's flags are
// ignored (libzmq sends MESSAGE frames with none): the inner ones count.
func (o *opener) next() error {
	h, _, err := peekHeader(o.rd)
	if err != nil {
		return err
	}
	_, _ = o.rd.Discard(h.Len)
	if h.Size < messageMin {
		return protoErr("CURVE: a frame of %d bytes is not a MESSAGE", h.Size)
	}
	if h.Size-messageExtra-1 > uint64(o.lim.MaxMessage) {
		return protoErr("message of more than %d bytes (the limit; see --max-message-size)", o.lim.MaxMessage)
	}
	if o.prog != nil {
		o.prog.open(int64(h.Size))
	}
	var held int64
	hold := func(n int64) error {
		held += n
		if o.sh == nil {
			return nil
		}
		return o.sh.take(o.acct, n)
	}
	defer func() {
		if o.sh != nil {
			o.sh.give(o.acct, held)
		}
	}()
	chunks, err := readChunks(o.rd, h.Size, hold)
	if err != nil {
		return err
	}
	body := chunks[0]
	if len(chunks) > 1 {
		// The MAC covers the whole box: open it in one buffer.
		if err := hold(int64(h.Size)); err != nil {
			return err
		}
		body = make([]byte, 0, h.Size)
		for i, c := range chunks {
			body = append(body, c...)
			chunks[i] = nil
		}
	}
	flags, payload, err := o.cs.open(body)
	if err != nil {
		return err
	}
	o.hdr = AppendFrameHeader(o.hdr[:0], flags, len(payload))
	o.payload = payload
	return nil
}
