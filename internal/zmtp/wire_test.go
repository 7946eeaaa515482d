package zmtp

import (
	"bytes"
	"errors"
	"testing"
)

func greeting(edit func(g []byte)) []byte {
	g := AppendGreeting(nil, false)
	if edit != nil {
		edit(g)
	}
	return g
}

func TestParseGreeting(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"ours", greeting(nil), true},
		{"libzmq 3.1 as server", greeting(func(g []byte) { g[11], g[32] = 1, 1 }), true},
		{"short", greeting(nil)[:63], false},
		{"no signature", greeting(func(g []byte) { g[0] = 0 }), false},
		{"no footer", greeting(func(g []byte) { g[9] = 0 }), false},
		{"ZMTP 2.0", greeting(func(g []byte) { g[10] = 1 }), false},
		{"CURVE", greeting(func(g []byte) { copy(g[12:32], "CURVE\x00\x00\x00") }), true}, // the door checks it is its own
		{"PLAIN", greeting(func(g []byte) { copy(g[12:32], "PLAIN\x00\x00\x00") }), false},
		{"mechanism garbage after NUL", greeting(func(g []byte) { g[20] = 'x' }), false},
		{"as-server 7", greeting(func(g []byte) { g[32] = 7 }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGreeting(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
		})
	}
}

func TestParseFrameHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want FrameHeader
		ok   bool
	}{
		{"short message", []byte{0, 5}, FrameHeader{0, 5, 2}, true},
		{"more", []byte{FlagMore, 0}, FrameHeader{FlagMore, 0, 2}, true},
		{"long", []byte{FlagLong, 0, 0, 0, 0, 0, 1, 0, 0}, FrameHeader{FlagLong, 65536, 9}, true},
		{"absurd long", []byte{FlagLong, 0x40, 0, 0, 0, 0, 0, 0, 0}, FrameHeader{FlagLong, 1 << 62, 9}, true}, // the limit is the reader's
		{"command", []byte{FlagCommand, 10}, FrameHeader{FlagCommand, 10, 2}, true},
		{"command with more", []byte{FlagCommand | FlagMore, 10}, FrameHeader{}, false},
		{"reserved bits", []byte{0x80, 1}, FrameHeader{}, false},
		{"short long header", []byte{FlagLong, 0, 0}, FrameHeader{}, false},
		{"empty", nil, FrameHeader{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseFrameHeader(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && h != tc.want {
				t.Fatalf("got %+v, want %+v", h, tc.want)
			}
		})
	}
}

func TestFrameHeaderRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, 255, 256, 70000} {
		b := AppendFrameHeader(nil, FlagMore, size)
		h, err := ParseFrameHeader(b)
		if err != nil || h.Size != uint64(size) || !h.More() || h.Len != len(b) {
			t.Fatalf("size %d: %+v %v", size, h, err)
		}
	}
}

func TestParseReady(t *testing.T) {
	ready := func(props ...[]byte) []byte {
		b := []byte("\x05READY")
		for _, p := range props {
			b = append(b, p...)
		}
		return b
	}
	prop := func(name, value string) []byte { return AppendProperty(nil, name, []byte(value)) }
	long := string(bytes.Repeat([]byte("i"), 256))
	for _, tc := range []struct {
		name string
		in   []byte
		want Ready
		ok   bool
	}{
		{"dealer with identity", ready(prop("Socket-Type", "DEALER"), prop("Identity", "abc")), Ready{"DEALER", []byte("abc")}, true},
		{"lower-case names, sub", ready(prop("socket-type", "sub")), Ready{SocketType: "SUB"}, true},
		{"unknown property kept out", ready(prop("X-Foo", "bar"), prop("Socket-Type", "REQ")), Ready{SocketType: "REQ"}, true},
		{"no socket type", ready(prop("Identity", "abc")), Ready{}, false},
		{"not READY", append([]byte("\x05HELLO"), prop("Socket-Type", "DEALER")...), Ready{}, false},
		{"name length past the end", ready([]byte{200, 'a'}), Ready{}, false},
		{"zero name length", ready([]byte{0, 0, 0, 0, 0}), Ready{}, false},
		{"value length past the end", ready([]byte("\x0bSocket-Type\xff\xff\xff\xffDEALER")), Ready{}, false},
		{"bad name byte", ready(prop("Socket Type", "DEALER")), Ready{}, false},
		{"identity of 256 bytes", ready(prop("Socket-Type", "DEALER"), prop("Identity", long)), Ready{}, false},
		{"command name past the end", []byte{200, 'R'}, Ready{}, false},
		{"empty", nil, Ready{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseReady(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (r.SocketType != tc.want.SocketType || !bytes.Equal(r.Identity, tc.want.Identity)) {
				t.Fatalf("got %+v, want %+v", r, tc.want)
			}
		})
	}
	// What AppendReady writes, ParseReady reads.
	b := AppendReady(nil, "ROUTER", []byte{0, 1, 2})
	h, _ := ParseFrameHeader(b)
	r, err := ParseReady(b[h.Len:])
	if err != nil || r.SocketType != "ROUTER" || !bytes.Equal(r.Identity, []byte{0, 1, 2}) {
		t.Fatalf("round trip: %+v %v", r, err)
	}
}

func TestParsePing(t *testing.T) {
	if p, err := ParsePing([]byte{0, 10, 'c', 't', 'x'}); err != nil || p.TTL != 10 || string(p.Context) != "ctx" {
		t.Fatalf("%+v %v", p, err)
	}
	for _, bad := range [][]byte{nil, {0}, make([]byte, 19)} {
		if _, err := ParsePing(bad); err == nil {
			t.Fatalf("PING data %x accepted", bad)
		}
	}
}

func TestPrintableKeepsLogsClean(t *testing.T) {
	if got := printable("a\x1b[31mb\x00"); got != `a\x1b[31mb\x00` {
		t.Fatalf("got %q", got)
	}
	if got := printable(string(bytes.Repeat([]byte("x"), 100))); len(got) > 40 {
		t.Fatalf("not shortened: %q", got)
	}
}
