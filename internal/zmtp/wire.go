package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// The ZMTP 3 wire format (RFC 23/ZMTP, RFC 37/ZMTP for 3.1), as pure
// functions over bytes: every length a peer declares is checked against
// what is there and against a limit before anything is sliced or allocated.

// GreetingLen is the size of a ZMTP 3 greeting: signature 10, version 2,
// mechanism 20, as-server 1, filler 31.
const GreetingLen = 64

// Frame flags (RFC 23 §"Framing"). The other five bits are reserved and
// must be zero.
const (
	FlagMore     = 0x01
	FlagLong     = 0x02
	FlagCommand  = 0x04
	flagReserved = 0xF8
)

// ErrProtocol is wrapped by every error about bytes a peer sent that break
// the protocol or a limit; a connection that yields one is closed.
var ErrProtocol = errors.New("zmtp: protocol violation")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// Greeting is what a peer's greeting says.
type Greeting struct {
	Major, Minor byte
	Mechanism    string
	AsServer     bool
}

// ParseGreeting checks the 64 bytes a peer opens with. Only ZMTP 3.x with
// the NULL or CURVE mechanism is accepted (the caller checks it is the one
// it speaks); a 1.0 or 2.0 peer (libzmq < 4) is refused rather than
// downgraded to.
func ParseGreeting(b []byte) (Greeting, error) {
	if len(b) < GreetingLen {
		return Greeting{}, protoErr("greeting of %d bytes", len(b))
	}
	if b[0] != 0xFF || b[9] != 0x7F {
		return Greeting{}, protoErr("no ZMTP signature")
	}
	g := Greeting{Major: b[10], Minor: b[11], AsServer: b[32] == 1}
	if g.Major < 3 {
		return g, protoErr("ZMTP %d.%d is not supported", g.Major, g.Minor)
	}
	mech := b[12:32]
	if i := bytes.IndexByte(mech, 0); i >= 0 {
		if bytes.ContainsFunc(mech[i:], func(r rune) bool { return r != 0 }) {
			return g, protoErr("mechanism not NUL-padded")
		}
		mech = mech[:i]
	}
	g.Mechanism = string(mech)
	if g.Mechanism != MechNull && g.Mechanism != MechCurve {
		return g, protoErr("mechanism %q is not supported", printable(g.Mechanism))
	}
	if b[32] > 1 {
		return g, protoErr("as-server byte %d", b[32])
	}
	return g, nil
}

// The security mechanisms a door speaks.
const (
	MechNull  = "NULL"
	MechCurve = "CURVE"
)

// AppendGreeting appends a ZMTP 3.0 NULL greeting.
func AppendGreeting(b []byte, asServer bool) []byte {
	return AppendGreetingMech(b, MechNull, asServer)
}

// AppendGreetingMech appends a ZMTP 3.0 greeting for mechanism.
func AppendGreetingMech(b []byte, mechanism string, asServer bool) []byte {
	var g [GreetingLen]byte
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 0
	copy(g[12:32], mechanism)
	if asServer {
		g[32] = 1
	}
	return append(b, g[:]...)
}

// FrameHeader is a decoded frame header.
type FrameHeader struct {
	Flags byte
	Size  uint64
	Len   int // bytes of the header itself: 2 or 9
}

func (h FrameHeader) More() bool    { return h.Flags&FlagMore != 0 }
func (h FrameHeader) Command() bool { return h.Flags&FlagCommand != 0 }

// HeaderLen returns how long the header starting with flag byte first is.
func HeaderLen(first byte) int {
	if first&FlagLong != 0 {
		return 9
	}
	return 2
}

// ParseFrameHeader decodes the header at the start of b, which must hold
// HeaderLen(b[0]) bytes. Reserved flag bits and a command with MORE are
// refused; a long header for a size that would fit a short one is
// accepted, as libzmq accepts it. The size is not limited here: that is
// the reader's job, with its limits.
func ParseFrameHeader(b []byte) (FrameHeader, error) {
	if len(b) == 0 {
		return FrameHeader{}, protoErr("empty frame header")
	}
	h := FrameHeader{Flags: b[0], Len: HeaderLen(b[0])}
	if len(b) < h.Len {
		return h, protoErr("short frame header")
	}
	if err := checkFlags(h.Flags); err != nil {
		return h, err
	}
	if h.Len == 2 {
		h.Size = uint64(b[1])
	} else {
		h.Size = binary.BigEndian.Uint64(b[1:9])
	}
	return h, nil
}

// checkFlags checks a frame's flags: no reserved bit, no command with MORE.
func checkFlags(flags byte) error {
	if flags&flagReserved != 0 {
		return protoErr("reserved frame flags %#02x", flags)
	}
	if flags&FlagCommand != 0 && flags&FlagMore != 0 {
		return protoErr("command frame with MORE")
	}
	return nil
}

// AppendFrameHeader appends the shortest header for a frame of size bytes.
func AppendFrameHeader(b []byte, flags byte, size int) []byte {
	if size > 255 {
		b = append(b, flags|FlagLong)
		return binary.BigEndian.AppendUint64(b, uint64(size))
	}
	return append(b, flags&^FlagLong, byte(size))
}

// AppendCommand appends a whole command frame.
func AppendCommand(b []byte, name string, data []byte) []byte {
	b = AppendFrameHeader(b, FlagCommand, 1+len(name)+len(data))
	b = append(b, byte(len(name)))
	b = append(b, name...)
	return append(b, data...)
}

// ParseCommand splits a command frame's body into its name and data.
func ParseCommand(body []byte) (name string, data []byte, err error) {
	if len(body) == 0 {
		return "", nil, protoErr("empty command")
	}
	n := int(body[0])
	if n == 0 || 1+n > len(body) {
		return "", nil, protoErr("command name of %d bytes in a %d-byte command", n, len(body))
	}
	return string(body[1 : 1+n]), body[1+n:], nil
}

// Property is one metadata property of a READY command.
type Property struct {
	Name  string
	Value []byte
}

// ParseMetadata parses READY's properties (RFC 23 §"The NULL Security
// Mechanism"): name length (1 byte, at least 1), name, value length (4
// bytes, big endian), value; each within data.
func ParseMetadata(data []byte) ([]Property, error) {
	var props []Property
	for len(data) > 0 {
		n := int(data[0])
		if n == 0 || 1+n+4 > len(data) {
			return nil, protoErr("property name of %d bytes overruns the command", n)
		}
		name := data[1 : 1+n]
		for _, c := range name {
			if !isNameChar(c) {
				return nil, protoErr("property name with byte %#02x", c)
			}
		}
		v := binary.BigEndian.Uint32(data[1+n:])
		rest := data[1+n+4:]
		if uint64(v) > uint64(len(rest)) {
			return nil, protoErr("property value of %d bytes overruns the command", v)
		}
		props = append(props, Property{Name: string(name), Value: rest[:v]})
		data = rest[v:]
	}
	return props, nil
}

// AppendProperty appends one metadata property.
func AppendProperty(b []byte, name string, value []byte) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// isNameChar: RFC 23 allows alphanumerics and "-_.+" in property names.
func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '+'
}

// Ready is what a peer's READY command says about it.
type Ready struct {
	SocketType string // upper case: DEALER, SUB, …
	Identity   []byte // may be empty
}

// MaxIdentity is the longest routing identity ZMTP allows (RFC 23: 255
// octets, so it fits one short frame).
const MaxIdentity = 255

// ParseReady reads a READY command body.
func ParseReady(body []byte) (Ready, error) {
	name, data, err := ParseCommand(body)
	if err != nil {
		return Ready{}, err
	}
	if name != "READY" {
		return Ready{}, protoErr("%s instead of READY", printable(name))
	}
	return parseReadyMetadata(data)
}

// parseReadyMetadata reads the properties of a NULL READY or a CURVE
// INITIATE: the peer's socket type and routing identity.
func parseReadyMetadata(data []byte) (Ready, error) {
	props, err := ParseMetadata(data)
	if err != nil {
		return Ready{}, err
	}
	var r Ready
	for _, p := range props {
		switch strings.ToLower(p.Name) {
		case "socket-type":
			if len(p.Value) > 16 {
				return r, protoErr("socket type of %d bytes", len(p.Value))
			}
			r.SocketType = strings.ToUpper(string(p.Value))
		case "identity":
			if len(p.Value) > MaxIdentity {
				return r, protoErr("identity of %d bytes", len(p.Value))
			}
			r.Identity = p.Value
		}
	}
	if r.SocketType == "" {
		return r, protoErr("READY without Socket-Type")
	}
	return r, nil
}

// AppendReady appends a READY command frame with a Socket-Type and, when
// identity is not nil, an Identity property.
func AppendReady(b []byte, socketType string, identity []byte) []byte {
	var data []byte
	data = AppendProperty(data, "Socket-Type", []byte(socketType))
	if identity != nil {
		data = AppendProperty(data, "Identity", identity)
	}
	return AppendCommand(b, "READY", data)
}

// compatible reports whether a peer of socket type peer may connect to a
// socket of type ours (RFC 23 §"Socket types"; as zmq4 and libzmq check).
func compatible(ours, peer string) bool {
	switch ours {
	case "ROUTER":
		return peer == "DEALER" || peer == "REQ" || peer == "ROUTER"
	case "PUB":
		return peer == "SUB" || peer == "XSUB"
	}
	return false
}

// Ping is a PING command's data: TTL (deciseconds) and context.
type Ping struct {
	TTL     uint16
	Context []byte
}

// ParsePing reads a PING command's data (RFC 37: 2-byte TTL, then at most
// 16 bytes of context).
func ParsePing(data []byte) (Ping, error) {
	if len(data) < 2 || len(data) > 2+16 {
		return Ping{}, protoErr("PING of %d bytes", len(data))
	}
	return Ping{TTL: binary.BigEndian.Uint16(data), Context: data[2:]}, nil
}

// AppendPing appends a PING command frame with TTL 0: a libzmq peer then
// answers without starting a timer of its own.
func AppendPing(b []byte, context []byte) []byte {
	return AppendCommand(b, "PING", append([]byte{0, 0}, context...))
}

// printable makes a peer's string safe for a log line.
func printable(s string) string {
	const max = 32
	var b strings.Builder
	for i, r := range s {
		if i >= max {
			b.WriteString("…")
			break
		}
		if r < 0x20 || r == 0x7F || r == 0xFFFD {
			fmt.Fprintf(&b, "\\x%02x", s[i])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
