package zmtp

import (
	"fmt"
	"strings"
)

// Z85 (ZeroMQ RFC 32) is how CurveZMQ keys are written in text: four bytes
// become five characters of a 85-character alphabet, most significant
// first. Jupyter's connection files hold the kernel's key pair this way.
const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

var z85Value = func() (v [256]byte) {
	for i := range v {
		v[i] = 0xFF
	}
	for i := 0; i < len(z85Alphabet); i++ {
		v[z85Alphabet[i]] = byte(i)
	}
	return v
}()

// Z85Decode decodes s, whose length must be a multiple of 5. A character
// outside the alphabet, or a group whose value does not fit 32 bits, is an
// error naming its position, never the text itself (it may be a key).
func Z85Decode(s string) ([]byte, error) {
	if len(s)%5 != 0 {
		return nil, fmt.Errorf("z85: %d characters, not a multiple of 5", len(s))
	}
	out := make([]byte, 0, len(s)/5*4)
	for i := 0; i < len(s); i += 5 {
		var v uint64
		for j := range 5 {
			d := z85Value[s[i+j]]
			if d == 0xFF {
				return nil, fmt.Errorf("z85: character %d is not in the alphabet", i+j+1)
			}
			v = v*85 + uint64(d)
		}
		if v > 0xFFFFFFFF {
			return nil, fmt.Errorf("z85: characters %d-%d overflow 32 bits", i+1, i+5)
		}
		out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return out, nil
}

// Z85Encode encodes b, whose length must be a multiple of 4.
func Z85Encode(b []byte) string {
	if len(b)%4 != 0 {
		panic("z85: length not a multiple of 4")
	}
	var sb strings.Builder
	sb.Grow(len(b) / 4 * 5)
	for i := 0; i < len(b); i += 4 {
		v := uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])
		var g [5]byte
		for j := 4; j >= 0; j-- {
			g[j] = z85Alphabet[v%85]
			v /= 85
		}
		sb.Write(g[:])
	}
	return sb.String()
}
