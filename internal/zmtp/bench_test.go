package zmtp

import (
	"bytes"
	"io"
	"testing"
)

// BenchmarkConnWrite is the relay's hot path out: zmq4 writing one
// display_data-sized iopub message (topic, delimiter, signature, header,
// parent, metadata, content) to a subscriber that keeps reading.
func BenchmarkConnWrite(b *testing.B) {
	raw, peer := tcpPair(b)
	go io.Copy(io.Discard, peer)
	c := newConn(raw, nil, NewShared(Limits{}, nil))
	c.subs = map[string]int{"": 1}
	defer c.Close()
	c.Write(make([]byte, GreetingLen))
	msg := [][]byte{[]byte("kernel.0f1e2d3c.display_data"), []byte("<IDS|MSG>"), bytes.Repeat([]byte("a"), 64),
		bytes.Repeat([]byte("h"), 180), bytes.Repeat([]byte("p"), 180), []byte("{}"), bytes.Repeat([]byte("c"), 120)}
	var pieces [][]byte
	for i, f := range msg {
		flags := byte(FlagMore)
		if i == len(msg)-1 {
			flags = 0
		}
		pieces = append(pieces, frame(flags, f)...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, p := range pieces {
			c.Write(p)
		}
	}
}
