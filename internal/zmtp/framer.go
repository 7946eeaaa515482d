package zmtp

import "encoding/binary"

// framer follows a byte stream of frames written in whatever pieces, and
// tells where each frame and message starts and ends. It never copies or
// changes a byte. A greeting (when the stream starts with one) and ZMTP
// commands count as "control" messages.
type framer struct {
	greeting int // greeting bytes still to pass

	inMsg   bool // inside a message (between its first and last byte)
	control bool // the current message is the greeting or a command
	more    bool // the current frame has the MORE flag
	frame   int  // index of the current frame within its message

	hdr    [9]byte // frame header being collected
	hlen   int     // bytes of hdr collected
	body   uint64  // body bytes of the current frame still to pass
	inBody bool
}

// step is what framer.step found about the piece it consumed.
type step struct {
	n        int  // bytes consumed
	start    bool // the piece starts a message
	frameEnd bool // the piece ends a frame (or the greeting)
	end      bool // the piece ends a message
	control  bool // the message is the greeting or a command
	frame    int  // index of the piece's frame within its message
}

// step consumes a prefix of p that lies within one frame.
func (f *framer) step(p []byte) (s step) {
	if !f.inMsg {
		s.start = true
		f.inMsg, f.frame = true, 0
		f.control = f.greeting > 0
		if !f.control && len(p) > 0 {
			f.control = p[0]&FlagCommand != 0
		}
	}
	s.control, s.frame = f.control, f.frame
	if f.greeting > 0 {
		s.n = min(len(p), f.greeting)
		f.greeting -= s.n
		if f.greeting == 0 {
			f.inMsg = false
			s.frameEnd, s.end = true, true
		}
		return s
	}
	for s.n < len(p) && !f.inBody {
		f.hdr[f.hlen] = p[s.n]
		f.hlen++
		s.n++
		need := 2
		if f.hdr[0]&FlagLong != 0 {
			need = 9
		}
		if f.hlen < need {
			continue
		}
		if need == 2 {
			f.body = uint64(f.hdr[1])
		} else {
			f.body = binary.BigEndian.Uint64(f.hdr[1:9])
		}
		f.more = f.hdr[0]&FlagMore != 0 && f.hdr[0]&FlagCommand == 0
		f.hlen = 0
		f.inBody = true
	}
	if !f.inBody {
		return s
	}
	n := min(uint64(len(p)-s.n), f.body)
	s.n += int(n)
	f.body -= n
	if f.body > 0 {
		return s
	}
	f.inBody = false
	s.frameEnd = true
	f.frame++
	if !f.more {
		f.inMsg = false
		s.end = true
	}
	return s
}
