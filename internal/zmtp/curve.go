package zmtp

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/poly1305" //nolint:staticcheck // Poly1305 as NaCl's secretbox uses it, for sealing in place
	"golang.org/x/crypto/salsa20/salsa"
)

// CurveZMQ (ZeroMQ RFC 26) as a server: the handshake and the MESSAGE
// boxes, as functions over bytes. A Door speaks it when its Shared has
// keys (Shared.UseCurve); docs/design.md#transport-encryption says why and
// how it fits the relay. Clients are not authenticated (no ZAP): as with
// ipykernel's own CURVE sockets, whoever knows the server's public key may
// connect, and the HMAC key of the connection file is what authorizes a
// message. What CURVE adds is that no other local user can read or alter
// the traffic.

// CurveKeys is a CurveZMQ server's long-term key pair.
type CurveKeys struct {
	Public, Secret [32]byte
}

// ParseCurveKeys reads a Z85 public and secret key (40 characters each, as
// jupyter_client writes curve_publickey and curve_secretkey) and checks
// that the public key is the secret key's.
func ParseCurveKeys(public, secret string) (*CurveKeys, error) {
	var k CurveKeys
	for _, f := range []struct {
		name string
		text string
		to   *[32]byte
	}{{"public", public, &k.Public}, {"secret", secret, &k.Secret}} {
		if len(f.text) != 40 {
			return nil, fmt.Errorf("CURVE %s key of %d characters, want 40 (Z85)", f.name, len(f.text))
		}
		b, err := Z85Decode(f.text)
		if err != nil {
			return nil, fmt.Errorf("CURVE %s key: %w", f.name, err)
		}
		copy(f.to[:], b)
	}
	pub, err := curve25519.X25519(k.Secret[:], curve25519.Basepoint)
	if err != nil {
		return nil, fmt.Errorf("CURVE secret key: %w", err)
	}
	if subtle.ConstantTimeCompare(pub, k.Public[:]) != 1 {
		return nil, errors.New("CURVE public key is not the secret key's")
	}
	return &k, nil
}

// Sizes of the CurveZMQ commands (RFC 26), command name included.
const (
	helloSize    = 200 // "\x05HELLO", version 2, padding 72, C' 32, nonce 8, box 80
	welcomeSize  = 168 // "\x07WELCOME", nonce 16, box 144
	initiateMin  = 257 // "\x08INITIATE", cookie 96, nonce 8, box ≥ 144
	messageMin   = 33  // "\x07MESSAGE", nonce 8, box ≥ 17 (MAC 16, flags 1)
	messageExtra = 32  // what a MESSAGE adds to the frame it carries, flags byte aside
)

// Inner flags of a MESSAGE box's first byte (libzmq's msg_t flags).
const (
	boxMore    = 0x01
	boxCommand = 0x02
)

// curveServer is the server side of one CurveZMQ connection. The reader
// goroutine uses open, the writer (under the conn's lock) seal; they share
// only the precomputed key, which is set before either starts.
type curveServer struct {
	keys      *CurveKeys
	cnPublic  [32]byte // S': ours, for this connection only
	cnSecret  [32]byte
	cnClient  [32]byte // C': the client's, for this connection only
	cookieKey [32]byte
	shared    [32]byte // box key of C' and s'
	nonce     uint64   // our last short nonce
	peerNonce uint64   // the client's last short nonce
}

func newCurveServer(keys *CurveKeys) (*curveServer, error) {
	pub, sec, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	s := &curveServer{keys: keys, cnPublic: *pub, cnSecret: *sec}
	if _, err := rand.Read(s.cookieKey[:]); err != nil {
		return nil, err
	}
	return s, nil
}

func nonce(prefix string, short []byte) *[24]byte {
	var n [24]byte
	copy(n[:], prefix)
	copy(n[len(prefix):], short)
	return &n
}

func randomNonce(prefix string) (*[24]byte, error) {
	var n [24]byte
	copy(n[:], prefix)
	_, err := rand.Read(n[len(prefix):])
	return &n, err
}

// shortNonce checks that a client's 8-byte nonce is above every one it
// used before (RFC 26: nonces never repeat; libzmq requires them to grow).
func (s *curveServer) shortNonce(b []byte) error {
	n := binary.BigEndian.Uint64(b)
	if n <= s.peerNonce {
		return protoErr("CURVE nonce %d after %d", n, s.peerNonce)
	}
	s.peerNonce = n
	return nil
}

// hello checks a HELLO command body and returns the WELCOME body.
func (s *curveServer) hello(body []byte) ([]byte, error) {
	if len(body) != helloSize || !bytes.HasPrefix(body, []byte("\x05HELLO")) {
		return nil, protoErr("CURVE: not a HELLO of %d bytes", helloSize)
	}
	if body[6] != 1 || body[7] != 0 {
		return nil, protoErr("CURVE version %d.%d", body[6], body[7])
	}
	copy(s.cnClient[:], body[80:112])
	if err := s.shortNonce(body[112:120]); err != nil {
		return nil, err
	}
	sig, ok := box.Open(nil, body[120:200], nonce("CurveZMQHELLO---", body[112:120]), &s.cnClient, &s.keys.Secret)
	if !ok || len(sig) != 64 || !allZero(sig) {
		return nil, protoErr("CURVE HELLO does not open: the client has another server key")
	}

	cookieNonce, err := randomNonce("COOKIE--")
	if err != nil {
		return nil, err
	}
	plain := append(append(make([]byte, 0, 64), s.cnClient[:]...), s.cnSecret[:]...)
	cookie := append(make([]byte, 0, 96), cookieNonce[8:]...)
	cookie = secretbox.Seal(cookie, plain, cookieNonce, &s.cookieKey)
	clear(plain)

	welcomeNonce, err := randomNonce("WELCOME-")
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, welcomeSize)
	out = append(out, "\x07WELCOME"...)
	out = append(out, welcomeNonce[8:]...)
	out = box.Seal(out, append(s.cnPublic[:], cookie...), welcomeNonce, &s.cnClient, &s.keys.Secret)
	return out, nil
}

// initiate checks an INITIATE command body (cookie, vouch) and returns its
// metadata, the properties a NULL READY would carry.
func (s *curveServer) initiate(body []byte) ([]byte, error) {
	if len(body) < initiateMin || !bytes.HasPrefix(body, []byte("\x08INITIATE")) {
		return nil, protoErr("CURVE: not an INITIATE of at least %d bytes", initiateMin)
	}
	cookie, ok := secretbox.Open(nil, body[25:105], nonce("COOKIE--", body[9:25]), &s.cookieKey)
	if !ok || subtle.ConstantTimeCompare(cookie[:32], s.cnClient[:]) != 1 ||
		subtle.ConstantTimeCompare(cookie[32:], s.cnSecret[:]) != 1 {
		return nil, protoErr("CURVE INITIATE has a cookie this connection did not send")
	}
	clear(cookie)
	if err := s.shortNonce(body[105:113]); err != nil {
		return nil, err
	}
	plain, ok := box.Open(nil, body[113:], nonce("CurveZMQINITIATE", body[105:113]), &s.cnClient, &s.cnSecret)
	if !ok || len(plain) < 128 {
		return nil, protoErr("CURVE INITIATE does not open")
	}
	var client [32]byte // C: the client's long-term key, vouching for C'
	copy(client[:], plain[:32])
	vouch, ok := box.Open(nil, plain[48:128], nonce("VOUCH---", plain[32:48]), &client, &s.cnSecret)
	if !ok || len(vouch) != 64 ||
		subtle.ConstantTimeCompare(vouch[:32], s.cnClient[:]) != 1 ||
		subtle.ConstantTimeCompare(vouch[32:], s.keys.Public[:]) != 1 {
		return nil, protoErr("CURVE INITIATE vouch does not match")
	}
	box.Precompute(&s.shared, &s.cnClient, &s.cnSecret)
	return plain[128:], nil
}

// next returns our next short nonce.
func (s *curveServer) next() ([8]byte, error) {
	var b [8]byte
	if s.nonce == ^uint64(0) {
		return b, protoErr("CURVE nonces used up")
	}
	s.nonce++
	binary.BigEndian.PutUint64(b[:], s.nonce)
	return b, nil
}

// ready returns the READY command body carrying metadata.
func (s *curveServer) ready(metadata []byte) ([]byte, error) {
	short, err := s.next()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 14+box.Overhead+len(metadata))
	out = append(out, "\x05READY"...)
	out = append(out, short[:]...)
	return box.SealAfterPrecomputation(out, metadata, nonce("CurveZMQREADY---", short[:]), &s.shared), nil
}

// messageFrame starts the wire frame of a MESSAGE carrying a frame of
// size bytes with flags: header, command name, room for the nonce and the
// tag, the inner flags byte. The caller appends the frame's body, then
// calls sealMessage. One buffer, sized once: the frame's bytes are copied
// into it once and encrypted where they lie.
func messageFrame(flags byte, size uint64) []byte {
	wire := 16 + box.Overhead + 1 + size
	out := make([]byte, 0, 9+wire)
	out = AppendFrameHeader(out, 0, int(wire))
	out = append(out, "\x07MESSAGE"...)
	out = append(out, make([]byte, 8+box.Overhead)...)
	var inner byte
	if flags&FlagMore != 0 {
		inner |= boxMore
	}
	if flags&FlagCommand != 0 {
		inner |= boxCommand
	}
	return append(out, inner)
}

// sealMessage seals a frame messageFrame started and the caller filled:
// our next nonce goes in, the rest is encrypted in place.
func (s *curveServer) sealMessage(frame []byte) error {
	short, err := s.next()
	if err != nil {
		return err
	}
	at := HeaderLen(frame[0]) + 8 // the nonce, then the tag and the box
	copy(frame[at:], short[:])
	sealInPlace(frame[at+8:], nonce("CurveZMQMESSAGES", short[:]), &s.shared)
	return nil
}

// open returns the ZMTP flags and body of the frame a MESSAGE body
// carries, decrypted in place (payload aliases body). Reserved inner flag
// bits are ignored, as libzmq ignores them.
func (s *curveServer) open(body []byte) (flags byte, payload []byte, err error) {
	if len(body) < messageMin || !bytes.HasPrefix(body, []byte("\x07MESSAGE")) {
		return 0, nil, protoErr("CURVE: not a MESSAGE")
	}
	if err := s.shortNonce(body[8:16]); err != nil {
		return 0, nil, err
	}
	plain, ok := openInPlace(body[16:], nonce("CurveZMQMESSAGEC", body[8:16]), &s.shared)
	if !ok || len(plain) < 1 {
		return 0, nil, protoErr("CURVE MESSAGE does not open")
	}
	if plain[0]&boxMore != 0 {
		flags |= FlagMore
	}
	if plain[0]&boxCommand != 0 {
		flags |= FlagCommand
	}
	return flags, plain[1:], nil
}

func allZero(b []byte) bool {
	var v byte
	for _, c := range b {
		v |= c
	}
	return v == 0
}

// sealInPlace is NaCl's secretbox (XSalsa20-Poly1305, what
// box.SealAfterPrecomputation computes) over b[16:], written where it lies,
// with the tag into b[:16]: a large iopub output is not copied again to be
// encrypted. TestSealInPlace holds it to box.SealAfterPrecomputation.
func sealInPlace(b []byte, nonce *[24]byte, key *[32]byte) {
	x := newXSalsa20(nonce, key)
	x.xor(b[16:])
	var tag [16]byte
	poly1305.Sum(&tag, b[16:], &x.polyKey)
	copy(b[:16], tag[:])
}

// openInPlace checks the tag b[:16] over b[16:] and decrypts b[16:] where
// it lies; it returns the plaintext (b[16:]) and whether the tag matched
// (nothing is decrypted when it does not).
func openInPlace(b []byte, nonce *[24]byte, key *[32]byte) ([]byte, bool) {
	if len(b) < 16 {
		return nil, false
	}
	x := newXSalsa20(nonce, key)
	var tag [16]byte
	copy(tag[:], b[:16])
	if !poly1305.Verify(&tag, b[16:], &x.polyKey) {
		return nil, false
	}
	x.xor(b[16:])
	return b[16:], true
}

// xsalsa20 is one message's XSalsa20 state as secretbox uses it: the
// subkey and counter derived from the nonce (HSalsa20), and the first
// keystream block, whose first 32 bytes are the Poly1305 key and whose
// other 32 encrypt the message's first 32 bytes.
type xsalsa20 struct {
	subKey  [32]byte
	counter [16]byte
	block   [64]byte
	polyKey [32]byte
}

func newXSalsa20(nonce *[24]byte, key *[32]byte) *xsalsa20 {
	x := &xsalsa20{}
	var hNonce [16]byte
	copy(hNonce[:], nonce[:16])
	salsa.HSalsa20(&x.subKey, &hNonce, key, &salsa.Sigma)
	copy(x.counter[:], nonce[16:])
	salsa.XORKeyStream(x.block[:], x.block[:], &x.counter, &x.subKey)
	copy(x.polyKey[:], x.block[:32])
	return x
}

// xor encrypts (or decrypts) m in place: its first 32 bytes with the rest
// of the first block, the others from block 1 on.
func (x *xsalsa20) xor(m []byte) {
	for i := range min(32, len(m)) {
		m[i] ^= x.block[32+i]
	}
	if len(m) > 32 {
		x.counter[8] = 1
		salsa.XORKeyStream(m[32:], m[32:], &x.counter, &x.subKey)
	}
}
