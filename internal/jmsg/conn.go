package jmsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Channel is one of the five Jupyter sockets; it indexes ConnInfo.Ports.
type Channel int

const (
	Shell Channel = iota
	IOPub
	Stdin
	Control
	HB
)

// Channels lists every channel in ConnInfo.Ports order.
var Channels = []Channel{Shell, IOPub, Stdin, Control, HB}

var channelNames = [...]string{"shell", "iopub", "stdin", "control", "hb"}

func (c Channel) String() string {
	if c < 0 || int(c) >= len(channelNames) {
		return "Channel(" + strconv.Itoa(int(c)) + ")"
	}
	return channelNames[c]
}

// portField is the connection-file field that holds c's port.
func (c Channel) portField() string { return c.String() + "_port" }

// ConnInfo is a parsed connection file. Key is the session key: never print it.
type ConnInfo struct {
	Transport       string // "tcp" or "ipc"
	IP              string // tcp: address to bind; ipc: path prefix of the socket files
	Ports           [5]int // indexed by Channel
	Key             string // HMAC key; may be empty (then messages are not signed)
	SignatureScheme string // "hmac-" + a hash name, see schemes
	KernelName      string
	Extra           map[string]json.RawMessage // unknown fields, written back by Marshal
}

// ConfigError is a connection file that cannot be used. Error() is one line naming the
// file and, where one is at fault, the field; it never contains the key.
type ConfigError struct {
	Path    string // "" when the ConnInfo did not come from a file
	Field   string // JSON field name, "" for file-level problems
	Problem string
	Err     error // underlying cause (e.g. *fs.PathError), for errors.Is/As; may be nil
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.Path == "" {
		b.WriteString("connection info")
	} else {
		b.WriteString("connection file ")
		b.WriteString(e.Path)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Problem)
	return b.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Load reads, parses and validates the connection file at path.
func Load(path string) (*ConnInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		// The PathError repeats the path; keep only its cause in the line, and the
		// whole error for errors.Is(err, fs.ErrNotExist).
		problem := err.Error()
		var pe *os.PathError
		if errors.As(err, &pe) {
			problem = pe.Err.Error()
		}
		return nil, &ConfigError{Path: path, Problem: "cannot read: " + problem, Err: err}
	}
	return Parse(path, data)
}

// Parse parses and validates a connection file's contents; path is only used in errors.
// Like jupyter_client, an absent transport means "tcp" and an absent signature_scheme
// means "hmac-sha256"; every other known field must be present.
func Parse(path string, data []byte) (*ConnInfo, error) {
	cfgErr := func(field, problem string, err error) error {
		return &ConfigError{Path: path, Field: field, Problem: problem, Err: err}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, cfgErr("", "empty file", nil)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, cfgErr("", "not a JSON object", err)
		}
		// A syntax error quotes at most one offending character, never a whole value.
		problem := "not valid JSON: " + err.Error()
		var se *json.SyntaxError
		if errors.As(err, &se) {
			problem += " (at byte " + strconv.FormatInt(se.Offset, 10) + ")"
		}
		return nil, cfgErr("", problem, err)
	}
	if fields == nil { // the literal null
		return nil, cfgErr("", "not a JSON object", nil)
	}

	c := &ConnInfo{Transport: "tcp", SignatureScheme: "hmac-sha256"}
	str := func(name string, dst *string, required bool) error {
		raw, ok := fields[name]
		delete(fields, name)
		if !ok {
			if required {
				return cfgErr(name, "missing", nil)
			}
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil || raw[0] != '"' {
			if name == "key" { // never echo anything from the key's field
				return cfgErr(name, "want a string", nil)
			}
			return cfgErr(name, "want a string, got "+excerpt(raw), nil)
		}
		return nil
	}
	if err := str("transport", &c.Transport, false); err != nil {
		return nil, err
	}
	if err := str("ip", &c.IP, true); err != nil {
		return nil, err
	}
	for _, ch := range Channels {
		name := ch.portField()
		raw, ok := fields[name]
		delete(fields, name)
		if !ok {
			return nil, cfgErr(name, "missing", nil)
		}
		// Only a plain JSON integer, as jupyter_client writes: "5555", 5555.0 and 5e3
		// would all reach zmq as something other than a port.
		n, err := strconv.Atoi(string(raw))
		if err != nil {
			return nil, cfgErr(name, "want an integer 1..65535, got "+excerpt(raw), nil)
		}
		c.Ports[ch] = n
	}
	if err := str("key", &c.Key, true); err != nil {
		return nil, err
	}
	if err := str("signature_scheme", &c.SignatureScheme, false); err != nil {
		return nil, err
	}
	if err := str("kernel_name", &c.KernelName, false); err != nil {
		return nil, err
	}
	if len(fields) > 0 {
		c.Extra = fields
	}
	if err := c.validate(path); err != nil {
		return nil, err
	}
	return c, nil
}

// validate checks the values (Parse has already checked the types).
func (c *ConnInfo) validate(path string) error {
	cfgErr := func(field, problem string) error {
		return &ConfigError{Path: path, Field: field, Problem: problem}
	}
	if c.Transport != "tcp" && c.Transport != "ipc" {
		return cfgErr("transport", fmt.Sprintf("unsupported %q (want tcp or ipc)", c.Transport))
	}
	if c.IP == "" {
		return cfgErr("ip", "empty")
	}
	for _, ch := range Channels {
		p := c.Ports[ch]
		if p < 1 || p > 65535 {
			return cfgErr(ch.portField(), "want an integer 1..65535, got "+strconv.Itoa(p))
		}
		// Two channels on one port (or, for ipc, one socket file) cannot both bind.
		for _, prev := range Channels[:ch] {
			if c.Ports[prev] == p {
				return cfgErr(ch.portField(), fmt.Sprintf("%d already used by %q", p, prev.portField()))
			}
		}
	}
	if _, ok := schemeHash(c.SignatureScheme); !ok {
		return cfgErr("signature_scheme", fmt.Sprintf("unsupported %q (want one of %s)",
			c.SignatureScheme, strings.Join(schemeNames, ", ")))
	}
	return nil
}

// excerpt shows a raw JSON value in an error line: compacted so it stays one line
// (valid JSON has no raw newline inside a string), and cut short.
func excerpt(raw json.RawMessage) string {
	const max = 40
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "an invalid value"
	}
	s := b.String()
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "…"
	}
	return s
}
