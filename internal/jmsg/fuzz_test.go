package jmsg

import (
	"bytes"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// frameSep joins frames into one fuzz input; any byte string works, this one is rare.
var frameSep = []byte{0xff, 0x00, 0xfe}

func FuzzSplit(f *testing.F) {
	for _, c := range loadCaptures(f) {
		f.Add(bytes.Join(c.frames, frameSep))
	}
	f.Add([]byte("<IDS|MSG>"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		frames := bytes.Split(data, frameSep)
		p, err := Split(frames)
		first := -1
		for i, fr := range frames {
			if bytes.Equal(fr, Delimiter) {
				first = i
				break
			}
		}
		switch {
		case first < 0:
			if !errors.Is(err, ErrNoDelimiter) {
				t.Fatalf("no delimiter: err = %v", err)
			}
		case len(frames)-first-1 < 5:
			if !errors.Is(err, ErrShortMessage) {
				t.Fatalf("short: err = %v", err)
			}
		default:
			testutil.NoErr(t, err)
			if len(p.Idents) != first || len(p.Idents)+6+len(p.Buffers) != len(frames) {
				t.Fatalf("Split lost frames: %d idents, %d buffers of %d", len(p.Idents), len(p.Buffers), len(frames))
			}
			if !bytes.Equal(p.Content, frames[first+5]) {
				t.Fatal("content is not the fifth frame after the delimiter")
			}
		}
	})
}

// msgTypeRef is an independent reference: Python's semantics (exact key, last
// duplicate wins, must be a string), through encoding/json.
func msgTypeRef(header []byte) (string, bool) {
	var m map[string]any
	if json.Unmarshal(header, &m) != nil || m == nil {
		return "", false
	}
	s, ok := m["msg_type"].(string)
	return s, ok
}

func FuzzMsgType(f *testing.F) {
	for _, c := range loadCaptures(f) {
		p, err := Split(c.frames)
		testutil.NoErr(f, err)
		f.Add(p.Header)
		f.Add(p.Parent)
	}
	for _, s := range []string{
		`{"x": {"msg_type": "decoy", "y": ["}", "\"msg_type\": \"z\""]}, "msg_type": "real"}`,
		`{"msg\u005ftype": "a", "msg_type": "b"}`, `{"msg_type": "a", "msg_type": 1}`,
		`{"msg_type": "exe\u0063ute"}`, "{\"msg_type\": \"\xff\"}", `{"a":[{"b":"\\"}], "msg_type":"t"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, header []byte) {
		got, err := MsgType(header)
		want, ok := msgTypeRef(header)
		if ok && (err != nil || got != want) {
			t.Fatalf("MsgType(%q) = %q, %v; encoding/json says %q", header, got, err, want)
		}
		if fast, fok := scanMsgType(header); fok && ok && fast != want {
			t.Fatalf("scan(%q) = %q; encoding/json says %q", header, fast, want)
		}
		if h, err := Header(header); err == nil && (!ok || h.MsgType != want) {
			t.Fatalf("Header(%q).MsgType = %q; encoding/json says %q, %v", header, h.MsgType, want, ok)
		}
	})
}

// BenchmarkVerify justifies pooling HMAC states in Signer.
func BenchmarkVerify(b *testing.B) {
	c := loadCaptures(b)[0]
	for _, x := range loadCaptures(b) {
		if x.Name == "shutdown_request-sha256" {
			c = x
		}
	}
	p, _ := Split(c.frames)
	s, _ := NewSigner(c.Scheme, c.Key)
	b.Run("pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !s.Verify(p) {
				b.Fatal("verify")
			}
		}
	})
	b.Run("hmac.New per call", func(b *testing.B) {
		b.ReportAllocs()
		h, _ := schemeHash(c.Scheme)
		for b.Loop() {
			m := hmac.New(h, []byte(c.Key))
			m.Write(p.Header)
			m.Write(p.Parent)
			m.Write(p.Metadata)
			m.Write(p.Content)
			sum := m.Sum(nil)
			dst := make([]byte, 2*len(sum))
			_ = dst
		}
	})
}

// BenchmarkMsgType justifies the hand scan over encoding/json.
func BenchmarkMsgType(b *testing.B) {
	var header []byte
	for _, c := range loadCaptures(b) {
		if c.Name == "execute_request-sha256" {
			p, _ := Split(c.frames)
			header = p.Header
		}
	}
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := MsgType(header); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := msgTypeRef(header); !ok {
				b.Fatal("json")
			}
		}
	})
}
