package zmtp

import (
	"bytes"
	"testing"
)

// frame encodes one ZMTP frame as zmq4 writes it: header, then body.
func frame(flags byte, body []byte) [][]byte {
	return [][]byte{AppendFrameHeader(nil, flags, len(body)), body}
}

// stream is a greeting, a READY command and two messages, as the pieces
// zmq4 passes to Write, and the expected message kinds.
func stream() (pieces [][]byte, control []bool) {
	pieces = append(pieces, make([]byte, GreetingLen))
	pieces = append(pieces, frame(FlagCommand, []byte("\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB"))...)
	pieces = append(pieces, frame(FlagMore, []byte("topic"))...)
	pieces = append(pieces, frame(FlagMore, bytes.Repeat([]byte("y"), 300))...)
	pieces = append(pieces, frame(FlagMore, nil)...)
	pieces = append(pieces, frame(0, []byte("last"))...)
	pieces = append(pieces, frame(0, []byte("single"))...)
	return pieces, []bool{true, true, false, false}
}

func TestFramerFindsMessagesInAnyChunking(t *testing.T) {
	pieces, wantControl := stream()
	all := bytes.Join(pieces, nil)
	chunked := func(n int) [][]byte {
		var out [][]byte
		for i := 0; i < len(all); i += n {
			out = append(out, all[i:min(i+n, len(all))])
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		chunks [][]byte
	}{
		{"as zmq4 writes", pieces},
		{"one write", [][]byte{all}},
		{"byte by byte", chunked(1)},
		{"7-byte chunks", chunked(7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := framer{greeting: GreetingLen}
			var starts, ends, frameEnds int
			var control []bool
			total := 0
			for _, c := range tc.chunks {
				for len(c) > 0 {
					s := f.step(c)
					if s.n == 0 {
						t.Fatalf("step consumed nothing")
					}
					if s.start {
						starts++
						control = append(control, s.control)
					}
					if s.frameEnd {
						frameEnds++
					}
					if s.end {
						ends++
						if ends != starts {
							t.Fatalf("message %d ended before it started", ends)
						}
					}
					total += s.n
					c = c[s.n:]
				}
			}
			// greeting, READY, 4 frames of the first message, 1 of the second
			if starts != len(wantControl) || ends != len(wantControl) || total != len(all) || frameEnds != 7 {
				t.Fatalf("starts %d ends %d frames %d bytes %d; want %d messages, 7 frames, %d bytes",
					starts, ends, frameEnds, total, len(wantControl), len(all))
			}
			for i := range control {
				if control[i] != wantControl[i] {
					t.Fatalf("message %d control = %v, want %v", i, control[i], wantControl[i])
				}
			}
		})
	}
}
