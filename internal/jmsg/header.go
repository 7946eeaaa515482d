package jmsg

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MsgType returns the header's msg_type. It runs on every shell and control message,
// so it first tries a scan of the top-level object that allocates only the result;
// whenever the scan meets anything it does not handle exactly (escapes or non-ASCII
// in msg_type, an escaped key, odd structure) it defers to encoding/json. For valid
// JSON both give the same answer, including "last duplicate wins" (FuzzMsgType checks).
func MsgType(header []byte) (string, error) {
	if t, ok := scanMsgType(header); ok {
		return t, nil
	}
	fields, err := headerFields(header)
	if err != nil {
		return "", err
	}
	t, ok, err := stringField(fields, "msg_type")
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%w: no msg_type", ErrBadHeader)
	}
	return t, nil
}

// scanMsgType is MsgType's fast path; ok=false means "ask encoding/json".
func scanMsgType(b []byte) (msgType string, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return "", false // empty object: let the slow path say msg_type is missing
	}
	var val []byte
	for {
		if i >= len(b) || b[i] != '"' {
			return "", false
		}
		end, plain := plainString(b, i)
		if !plain {
			return "", false // an escaped key might spell msg_type
		}
		key := b[i+1 : end-1]
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return "", false
		}
		i = skipWS(b, i+1)
		if string(key) == "msg_type" {
			if i >= len(b) || b[i] != '"' {
				return "", false
			}
			end, plain = plainString(b, i)
			if !plain {
				return "", false
			}
			val = b[i+1 : end-1] // keep scanning: a later duplicate wins, as in encoding/json
			i = end
		} else if i = skipValue(b, i); i < 0 {
			return "", false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return "", false
		}
		if b[i] == '}' {
			break
		}
		if b[i] != ',' {
			return "", false
		}
		i = skipWS(b, i+1)
	}
	if skipWS(b, i+1) != len(b) || val == nil {
		return "", false
	}
	return string(val), true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString scans the string starting at b[i]=='"' and returns the index after its
// closing quote. plain is false if it is unterminated or holds anything whose decoded
// form could differ from its bytes: an escape, a control byte, or non-ASCII (invalid
// UTF-8 is replaced by encoding/json).
func plainString(b []byte, i int) (end int, plain bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return 0, false
		}
	}
	return 0, false
}

// skipString returns the index after the string starting at b[i]=='"', or -1.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++ // the escaped byte cannot close the string
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index after the JSON value starting at b[i], or -1. It trusts
// the input to be JSON; on invalid input a wrong index only means a wrong fast-path
// answer for input that encoding/json rejects anyway.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				if j = skipString(b, j); j < 0 {
					return -1
				}
				j-- // the loop's j++ lands after the string
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i // number, true, false, null
	for j < len(b) && !isDelim(b[j]) {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

func headerFields(header []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(header, &fields); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHeader, err)
	}
	if fields == nil {
		return nil, fmt.Errorf("%w: null", ErrBadHeader)
	}
	return fields, nil
}

// stringField decodes fields[name]; ok=false if absent, an error if not a string.
func stringField(fields map[string]json.RawMessage, name string) (s string, ok bool, err error) {
	raw, ok := fields[name]
	if !ok {
		return "", false, nil
	}
	if len(raw) == 0 || raw[0] != '"' {
		return "", false, fmt.Errorf("%w: %s is not a string", ErrBadHeader, name)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, fmt.Errorf("%w: %s: %w", ErrBadHeader, name, err)
	}
	return s, true, nil
}

// MsgHeader is a message header's standard fields. Absent fields are ""; only
// msg_type is required, since older peers omit version or date.
type MsgHeader struct {
	MsgID, Session, Username, MsgType, Version, Date string
}

// Header decodes raw (a header frame). Field names match exactly, as in Python, not
// case-insensitively as encoding/json would into a struct.
func Header(raw []byte) (MsgHeader, error) {
	fields, err := headerFields(raw)
	if err != nil {
		return MsgHeader{}, err
	}
	var h MsgHeader
	for _, f := range []struct {
		name string
		dst  *string
	}{{"msg_id", &h.MsgID}, {"session", &h.Session}, {"username", &h.Username},
		{"msg_type", &h.MsgType}, {"version", &h.Version}, {"date", &h.Date}} {
		if *f.dst, _, err = stringField(fields, f.name); err != nil {
			return MsgHeader{}, err
		}
	}
	if _, ok := fields["msg_type"]; !ok {
		return MsgHeader{}, fmt.Errorf("%w: no msg_type", ErrBadHeader)
	}
	return h, nil
}

// Username and ProtocolVersion are what the supervisor's own messages carry.
const (
	Username        = "tfgpu-kernel"
	ProtocolVersion = "5.3"
)

// dateLayout is ISO 8601 with microseconds, what jupyter_client writes and parses.
const dateLayout = "2006-01-02T15:04:05.000000Z07:00"

// NewMessage builds a signed message the supervisor emits itself (e.g. its own
// shutdown_reply or a status on iopub): [idents…, <IDS|MSG>, hmac, header, parent,
// metadata {}, content]. parent is the request's raw header frame (nil for none, sent
// as {}); it is used as is, not copied. content is encoded with encoding/json (nil
// becomes {}). The header has a fresh msg_id (UUID4 hex), username tfgpu-kernel, the
// given session, the current UTC date and version 5.3.
func NewMessage(s *Signer, idents [][]byte, msgType string, parent []byte, session string, content any) ([][]byte, error) {
	if s == nil {
		return nil, errors.New("jmsg: new message: nil Signer")
	}
	if msgType == "" {
		return nil, errors.New("jmsg: new message: empty msg_type")
	}
	if len(bytes.TrimSpace(parent)) == 0 {
		parent = []byte("{}")
	} else if !json.Valid(parent) || bytes.TrimSpace(parent)[0] != '{' {
		return nil, fmt.Errorf("jmsg: new message %s: parent header is not a JSON object", msgType)
	}
	header, err := json.Marshal(struct {
		MsgID    string `json:"msg_id"`
		MsgType  string `json:"msg_type"`
		Username string `json:"username"`
		Session  string `json:"session"`
		Date     string `json:"date"`
		Version  string `json:"version"`
	}{newID(), msgType, Username, session, time.Now().UTC().Format(dateLayout), ProtocolVersion})
	if err != nil {
		return nil, fmt.Errorf("jmsg: new message %s: header: %w", msgType, err)
	}
	body := []byte("{}")
	if content != nil {
		if body, err = json.Marshal(content); err != nil {
			return nil, fmt.Errorf("jmsg: new message %s: content: %w", msgType, err)
		}
	}
	metadata := []byte("{}")
	frames := make([][]byte, 0, len(idents)+6)
	frames = append(frames, idents...)
	frames = append(frames, []byte(delim), s.Sign(header, parent, metadata, body), header, parent, metadata, body)
	return frames, nil
}

// newID is a random (version 4) UUID in 32 hex digits.
func newID() string {
	var u [16]byte
	rand.Read(u[:]) // never fails since Go 1.24; it crashes the program instead
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return hex.EncodeToString(u[:])
}
