package jmsg

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"strings"
	"sync"
)

// delim separates ZeroMQ routing identities from the message proper.
const delim = "<IDS|MSG>"

// Delimiter is the <IDS|MSG> frame. Treat it as read-only; the package itself compares
// against a constant, so changing it cannot break Split.
var Delimiter = []byte(delim)

var (
	ErrNoDelimiter   = errors.New("jmsg: no <IDS|MSG> delimiter")
	ErrShortMessage  = errors.New("jmsg: message too short")
	ErrBadHeader     = errors.New("jmsg: bad header")
	ErrUnknownScheme = errors.New("jmsg: unsupported signature scheme")
)

// Parts is one message cut at its frame boundaries. Every slice aliases the frames
// given to Split: nothing is copied, so the relay can forward the original frames.
type Parts struct {
	Idents                                       [][]byte // ZeroMQ routing identities
	Signature, Header, Parent, Metadata, Content []byte
	Buffers                                      [][]byte // not signed (spec: "buffers are not signed")
}

// Split cuts a message as jupyter_client's Session.feed_identities does: identities
// end at the first <IDS|MSG> frame, and at least the five signed parts must follow.
func Split(frames [][]byte) (Parts, error) {
	for i, f := range frames {
		if string(f) != delim { // no allocation: the compiler compares in place
			continue
		}
		rest := frames[i+1:]
		if len(rest) < 5 {
			return Parts{}, fmt.Errorf("%w: %d frames after %s, want at least 5",
				ErrShortMessage, len(rest), delim)
		}
		return Parts{
			// Capacity clipped so an append to Idents cannot overwrite the delimiter.
			Idents:    frames[:i:i],
			Signature: rest[0],
			Header:    rest[1],
			Parent:    rest[2],
			Metadata:  rest[3],
			Content:   rest[4],
			Buffers:   rest[5:],
		}, nil
	}
	return Parts{}, fmt.Errorf("%w in %d frames", ErrNoDelimiter, len(frames))
}

// schemeNames are the schemes accepted, in the order error messages list them. They are
// the hashlib algorithms every Python guarantees; jupyter_client takes any hashlib name
// after "hmac-", but ipykernel and the notebook only ever use hmac-sha256.
var schemeNames = []string{"hmac-sha256", "hmac-sha1", "hmac-md5", "hmac-sha512", "hmac-sha384", "hmac-sha224"}

var schemeFuncs = map[string]func() hash.Hash{
	"hmac-sha256": sha256.New,
	"hmac-sha1":   sha1.New,
	"hmac-md5":    md5.New,
	"hmac-sha512": sha512.New,
	"hmac-sha384": sha512.New384,
	"hmac-sha224": sha256.New224,
}

func schemeHash(scheme string) (func() hash.Hash, bool) {
	h, ok := schemeFuncs[scheme]
	return h, ok
}

// Signer signs and verifies messages with the session key. It is safe for concurrent
// use. HMAC states are pooled: hmac.New costs two hash allocations and a key schedule
// per message, a pooled Reset only restores the precomputed pad state (see
// BenchmarkSigner), and the pooled scratch buffers make Verify allocation-free.
type Signer struct {
	scheme string
	pool   *sync.Pool // of *macState; nil when the key is empty
}

type macState struct {
	mac hash.Hash
	sum []byte // digest scratch
	hex []byte // hex scratch
}

// NewSigner returns a Signer for scheme ("hmac-sha256", …) and key. An empty key gives
// a Signer that signs with "" and accepts everything, as Jupyter does.
func NewSigner(scheme, key string) (*Signer, error) {
	h, ok := schemeHash(scheme)
	if !ok {
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownScheme, scheme, strings.Join(schemeNames, ", "))
	}
	s := &Signer{scheme: scheme}
	if key == "" {
		return s, nil
	}
	k := []byte(key) // captured by the pool only: never a field fmt could print
	s.pool = &sync.Pool{New: func() any {
		m := hmac.New(h, k)
		return &macState{mac: m, sum: make([]byte, 0, m.Size()), hex: make([]byte, 2*m.Size())}
	}}
	return s, nil
}

// Scheme is the signature scheme, e.g. "hmac-sha256".
func (s *Signer) Scheme() string { return s.scheme }

// hexMAC computes the lowercase hex HMAC of the four signed parts into st.hex.
func (st *macState) hexMAC(header, parent, metadata, content []byte) []byte {
	st.mac.Reset()
	st.mac.Write(header)
	st.mac.Write(parent)
	st.mac.Write(metadata)
	st.mac.Write(content)
	st.sum = st.mac.Sum(st.sum[:0])
	hex.Encode(st.hex, st.sum)
	return st.hex
}

// Sign returns the lowercase hex HMAC of the four parts (the frame jupyter_client puts
// after <IDS|MSG>), or an empty slice when the key is empty.
func (s *Signer) Sign(header, parent, metadata, content []byte) []byte {
	if s.pool == nil {
		return []byte{}
	}
	st := s.pool.Get().(*macState)
	out := append([]byte(nil), st.hexMAC(header, parent, metadata, content)...)
	s.pool.Put(st)
	return out
}

// Verify reports whether p's signature is right, comparing in constant time the hex
// text itself, as jupyter_client does (so an upper-case hex signature fails there and
// here alike). With an empty key every message verifies: Jupyter does not check then.
func (s *Signer) Verify(p Parts) bool {
	if s.pool == nil {
		return true
	}
	st := s.pool.Get().(*macState)
	ok := hmac.Equal(st.hexMAC(p.Header, p.Parent, p.Metadata, p.Content), p.Signature)
	s.pool.Put(st)
	return ok
}

// String describes s without its key.
func (s Signer) String() string {
	key := "(empty)"
	if s.pool != nil {
		key = "(redacted)"
	}
	return "Signer{scheme=" + s.scheme + " key=" + key + "}"
}

// GoString covers %#v.
func (s Signer) GoString() string { return "jmsg." + s.String() }

// LogValue lets slog log a Signer without its key.
func (s Signer) LogValue() slog.Value {
	key := "(empty)"
	if s.pool != nil {
		key = "(redacted)"
	}
	return slog.GroupValue(slog.String("scheme", s.scheme), slog.String("key", key))
}

// WithContent returns p's message with its content replaced by content and
// signed again with s: the header, parent header, metadata, identities and
// buffers are p's own. The supervisor uses it for the one reply it adds to
// (usage_reply: docs/operating.md#usage-in-the-notebook).
func (s *Signer) WithContent(p Parts, content []byte) [][]byte {
	frames := make([][]byte, 0, len(p.Idents)+6+len(p.Buffers))
	frames = append(frames, p.Idents...)
	frames = append(frames, []byte(delim), s.Sign(p.Header, p.Parent, p.Metadata, content), p.Header, p.Parent, p.Metadata, content)
	return append(frames, p.Buffers...)
}
