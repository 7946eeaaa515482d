package wrapper

import "encoding/binary"

// zmtpGreetingLen is the size of the ZMTP 3.0 greeting zmq4 writes first on
// every connection (RFC 23/ZMTP: signature 10, version 2, mechanism 20,
// as-server 1, filler 31).
const zmtpGreetingLen = 64

// ZMTP frame flags (RFC 23/ZMTP §"Framing").
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

// framer follows the byte stream zmq4 writes to one connection, in whatever
// pieces it is written, and tells where each message starts and ends. It
// never copies or changes a byte. The greeting and ZMTP commands count as
// "control" messages, which are never dropped.
type framer struct {
	greeting int // greeting bytes still to pass

	inMsg   bool // inside a message (between its first and last frame)
	control bool // the current message is the greeting or a command
	more    bool // the current frame has the MORE flag

	hdr    [9]byte // frame header being collected
	hlen   int     // bytes of hdr collected
	body   uint64  // body bytes of the current frame still to pass
	inBody bool
}

// step consumes a prefix of p that lies within one message and returns its
// length k, whether p[0] is the first byte of a message (start), whether
// p[k-1] is its last byte (end), and whether the message is control traffic.
func (f *framer) step(p []byte) (k int, start, end, control bool) {
	if !f.inMsg {
		start = true
		f.inMsg = true
		f.control = f.greeting > 0
		if !f.control && len(p) > 0 {
			f.control = p[0]&flagCommand != 0
		}
	}
	control = f.control
	if f.greeting > 0 {
		k = min(len(p), f.greeting)
		f.greeting -= k
		if f.greeting == 0 {
			f.inMsg = false
			end = true
		}
		return k, start, end, control
	}
	for k < len(p) {
		if !f.inBody {
			f.hdr[f.hlen] = p[k]
			f.hlen++
			k++
			need := 2
			if f.hdr[0]&flagLong != 0 {
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
			f.more = f.hdr[0]&flagMore != 0 && f.hdr[0]&flagCommand == 0
			f.hlen = 0
			f.inBody = true
		}
		n := uint64(len(p) - k)
		if n > f.body {
			n = f.body
		}
		k += int(n)
		f.body -= n
		if f.body > 0 {
			return k, start, false, control
		}
		f.inBody = false
		if !f.more {
			f.inMsg = false
			return k, start, true, control
		}
	}
	return k, start, false, control
}
