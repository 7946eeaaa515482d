package zmtp

import (
	"bytes"
	"crypto/rand"
	"testing"

	"golang.org/x/crypto/nacl/box"
)

// sealInPlace and openInPlace are NaCl's secretbox, as box's
// SealAfterPrecomputation and OpenAfterPrecomputation compute it, for
// every length around the first block's 32 bytes and Salsa20's 64-byte
// blocks, and a large one.
func TestSealInPlace(t *testing.T) {
	var key [32]byte
	var n [24]byte
	rand.Read(key[:])
	lengths := []int{0, 1, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 1000, 4096 + 7, 1 << 20}
	for _, size := range lengths {
		rand.Read(n[:])
		msg := make([]byte, size)
		rand.Read(msg)
		want := box.SealAfterPrecomputation(nil, msg, &n, &key)

		b := append(make([]byte, 16), msg...)
		sealInPlace(b, &n, &key)
		if !bytes.Equal(b, want) {
			t.Fatalf("%d bytes: sealInPlace differs from box.SealAfterPrecomputation", size)
		}
		got, ok := openInPlace(b, &n, &key)
		if !ok || !bytes.Equal(got, msg) {
			t.Fatalf("%d bytes: openInPlace did not give the message back (ok %v)", size, ok)
		}
		if size > 0 {
			bad := bytes.Clone(want)
			bad[16+size/2] ^= 1
			before := bytes.Clone(bad)
			if _, ok := openInPlace(bad, &n, &key); ok {
				t.Fatalf("%d bytes: a flipped ciphertext bit opened", size)
			}
			if !bytes.Equal(bad, before) {
				t.Fatalf("%d bytes: a refused box was modified", size)
			}
		}
		bad := bytes.Clone(want)
		bad[0] ^= 1
		if _, ok := openInPlace(bad, &n, &key); ok {
			t.Fatalf("%d bytes: a flipped tag bit opened", size)
		}
	}
	if _, ok := openInPlace(make([]byte, 15), &n, &key); ok {
		t.Fatal("a box shorter than its tag opened")
	}
}

func BenchmarkSealInPlace(b *testing.B) {
	var key [32]byte
	var n [24]byte
	buf := make([]byte, 16+1<<20)
	b.SetBytes(1 << 20)
	for b.Loop() {
		sealInPlace(buf, &n, &key)
	}
}
