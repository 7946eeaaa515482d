package zmtp

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"golang.org/x/crypto/curve25519"
)

// The CURVE fuzzers drive real doors over TCP with the test client of
// curve_test.go. The server key pair and the client's randomness are
// fixed, so a seed that holds a HELLO stays a valid one, and an input
// replays the same way (but for the door's own randomness).

var fuzzCurveKeys = func() *CurveKeys {
	k := CurveKeys{Secret: sha256.Sum256([]byte("tfgpu-kernel CURVE fuzz server"))}
	pub, err := curve25519.X25519(k.Secret[:], curve25519.Basepoint)
	if err != nil {
		panic(err)
	}
	copy(k.Public[:], pub)
	return &k
}()

// fuzzCurveClient is the client every fuzz input uses: the same keys each
// time.
func fuzzCurveClient() *curveClient { return newCurveClient(fuzzCurveKeys.Public, detRand(1)) }

// xorMask returns b with mask XORed over its start; mask bytes past b's
// end are appended as they are. An empty mask leaves b valid.
func xorMask(b, mask []byte) []byte {
	out := bytes.Clone(b)
	for i, m := range mask {
		if i < len(out) {
			out[i] ^= m
		} else {
			out = append(out, mask[i:]...)
			break
		}
	}
	return out
}

// Where FuzzCurveHandshake puts the fuzzer's bytes (the first byte of an
// input picks; its high bit keeps the connection open after them, so the
// door must time out, where otherwise the client half-closes).
const (
	hsRaw            = iota // in place of HELLO
	hsMaskHello             // XORed over a valid HELLO frame
	hsAfterHello            // after a valid HELLO, in place of INITIATE
	hsMaskInitiate          // after a valid HELLO, XORed over a valid INITIATE frame
	hsInitiateMeta          // after a valid HELLO, as the metadata of a valid INITIATE
	hsModes                 // how many
	hsKeepOpen       = 0x80
	fuzzHandshakeIvl = 500 * time.Millisecond
)

// FuzzCurveHandshake sends a CURVE door, after a valid client greeting,
// whatever bytes the fuzzer makes, alone or around valid HELLO and
// INITIATE commands. Whatever they are: no panic; the door either
// completes the handshake (only possible with a valid INITIATE) or closes
// the connection, at the latest at HandshakeTimeout; and it then serves a
// good client, with nothing left counted.
func FuzzCurveHandshake(f *testing.F) {
	lim := fuzzLimits
	lim.HandshakeTimeout = fuzzHandshakeIvl
	b := bindCurveDoor(f, "ROUTER", lim, fuzzCurveKeys)

	hello := commandFrame(fuzzCurveClient().hello())
	seed := func(ctl byte, rest ...[]byte) { f.Add(append([]byte{ctl}, bytes.Join(rest, nil)...)) }
	seed(hsRaw)
	seed(hsRaw | hsKeepOpen) // silence: the timeout
	seed(hsRaw, hello)       // a valid HELLO, then the end
	seed(hsRaw, hello[:150])
	seed(hsRaw, hello, hello)
	seed(hsRaw, AppendReady(nil, "DEALER", nil)) // NULL's READY
	seed(hsRaw, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	seed(hsRaw, binary.BigEndian.AppendUint64([]byte{FlagCommand | FlagLong}, 1<<62))
	seed(hsRaw, []byte{FlagCommand, 200}, []byte("\x05HELLO"))
	seed(hsMaskHello)                               // the valid HELLO itself
	seed(hsMaskHello, []byte{0, 0x10})              // its size
	seed(hsMaskHello, make([]byte, 2+6), []byte{1}) // its version
	seed(hsMaskHello, make([]byte, 150), []byte{1}) // its box
	seed(hsMaskHello, make([]byte, 202), []byte("trailing"))
	seed(hsAfterHello) // nothing after HELLO
	seed(hsAfterHello | hsKeepOpen)
	seed(hsAfterHello, message([]byte("early")))
	seed(hsAfterHello, binary.BigEndian.AppendUint64([]byte{FlagCommand | FlagLong}, initiateMin+maxReady+1))
	seed(hsAfterHello, binary.BigEndian.AppendUint64([]byte{FlagCommand | FlagLong}, 4096), []byte("\x08INITIATE"))
	seed(hsAfterHello, hello)
	seed(hsMaskInitiate)                                 // the valid INITIATE: the handshake completes
	seed(hsMaskInitiate, make([]byte, 9+11), []byte{1})  // its cookie
	seed(hsMaskInitiate, make([]byte, 9+105), []byte{1}) // its nonce
	seed(hsMaskInitiate, make([]byte, 9+200), []byte{1}) // the vouch
	seed(hsMaskInitiate, make([]byte, 9+280), []byte("after the INITIATE"))
	seed(hsMaskInitiate|hsKeepOpen, make([]byte, 9+288), []byte{1})
	seed(hsInitiateMeta, readyMetadata("DEALER", nil))
	seed(hsInitiateMeta, readyMetadata("DEALER", []byte("fuzz-id")))
	seed(hsInitiateMeta|hsKeepOpen, readyMetadata("REQ", []byte{0, 1, 2}))
	seed(hsInitiateMeta, readyMetadata("PUB", nil))
	seed(hsInitiateMeta, readyMetadata("DEALER", make([]byte, 256)))
	seed(hsInitiateMeta)
	seed(hsInitiateMeta, []byte("\x0bSocket-Type\xff\xff\xff\xffDEALER"))
	seed(hsInitiateMeta, []byte{200, 'a'})

	f.Fuzz(func(t *testing.T, data []byte) {
		var ctl byte
		if len(data) > 0 {
			ctl, data = data[0], data[1:]
		}
		mode := int(ctl&^hsKeepOpen) % hsModes
		p := dialCurve(t, b.addr, fuzzCurveKeys.Public)
		p.cc = fuzzCurveClient()
		testutil.NoErr(t, p.greet())
		var out []byte
		switch mode {
		case hsRaw:
			out = data
		case hsMaskHello:
			out = xorMask(commandFrame(p.cc.hello()), data)
		default:
			if err := p.sendHello(); err != nil {
				t.Fatalf("a valid HELLO: %v", err)
			}
			switch mode {
			case hsAfterHello:
				out = data
			case hsMaskInitiate:
				out = xorMask(commandFrame(p.cc.initiate(readyMetadata("DEALER", nil))), data)
			case hsInitiateMeta:
				out = commandFrame(p.cc.initiate(data))
			}
		}
		_ = p.send(out) // the door may have closed already
		if ctl&hsKeepOpen == 0 {
			_ = p.c.(*net.TCPConn).CloseWrite()
		}
		// Whatever the door says, then its close; or READY.
		p.c.SetReadDeadline(time.Now().Add(fuzzHandshakeIvl + 3*time.Second))
		for {
			h, body, err := p.readFrame()
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				t.Fatalf("the door kept a connection in its handshake past HandshakeTimeout (mode %d)", mode)
			case errors.Is(err, ErrProtocol):
				t.Fatalf("the door sent a bad frame: %v", err)
			case err != nil: // closed
			case h.Command() && bytes.HasPrefix(body, []byte("\x05READY")):
				if mode != hsMaskInitiate && mode != hsInitiateMeta {
					t.Fatalf("the door completed a handshake without a valid INITIATE (mode %d)", mode)
				}
			default:
				continue
			}
			break
		}
		p.c.Close()
		waitConns(t, b, 0)

		good := dialCurve(t, b.addr, fuzzCurveKeys.Public)
		good.mustHandshake(t, "DEALER", []byte("good"))
		curveRoundTrip(t, b, good, "good")
		good.c.Close()
		waitConns(t, b, 0)
	})
}

// What FuzzCurveMessages sends after a valid handshake: the first byte of
// an input picks the door (bit 0: PUB, else ROUTER) and whether the rest
// is sent raw or (bit 1) as records sealed by the client. A record is
// [ctl][n][n bytes]; ctl's low 5 bits are the inner flags byte (MORE,
// COMMAND and three reserved bits); 0x20 makes it [ctl][n] for a frame of
// n×512 bytes (past stageAbove from n = 129); 0x40 flips the sealed
// frame's last byte; 0x80 seals it with the previous nonce again.
const (
	msgPub      = 0x01
	msgSealed   = 0x02
	recBig      = 0x20
	recFlip     = 0x40
	recSameNonc = 0x80
)

// fuzzProbe is the context of the PING that ends a sealed stream.
var fuzzProbe = []byte("fuzz-probe\xff\x00\xfe\x01end")

// sealRecords turns records into the MESSAGE frames cc seals, then the
// probe PING.
func sealRecords(cc *curveClient, data []byte) []byte {
	var out []byte
	for len(data) >= 2 {
		ctl, n := data[0], int(data[1])
		data = data[2:]
		var body []byte
		if ctl&recBig != 0 {
			body = bytes.Repeat([]byte{byte(n)}, n*512)
		} else {
			body = data[:min(n, len(data))]
			data = data[len(body):]
		}
		var m []byte
		if ctl&recSameNonc != 0 {
			m = cc.sealWith(cc.nonce, ctl&0x1F, body)
		} else {
			m = cc.seal(ctl&0x1F, body)
		}
		if ctl&recFlip != 0 {
			m[len(m)-1] ^= 0x01
		}
		out = append(out, m...)
	}
	return append(out, cc.sealCommand("PING", append([]byte{0, 0}, fuzzProbe...))...)
}

// curvePair is a curveServer and the fuzzers' client after a handshake
// between them, in-process, as a typ door and its client do it.
func curvePair(t testing.TB, typ string) (*curveServer, *curveClient) {
	t.Helper()
	cs, err := newCurveServer(fuzzCurveKeys)
	testutil.NoErr(t, err)
	cc := fuzzCurveClient()
	welcome, err := cs.hello(cc.hello())
	testutil.NoErr(t, err)
	testutil.NoErr(t, cc.welcome(welcome))
	socketType := "DEALER"
	if typ == "PUB" {
		socketType = "SUB"
	}
	meta, err := cs.initiate(cc.initiate(readyMetadata(socketType, nil)))
	testutil.NoErr(t, err)
	if r, err := parseReadyMetadata(meta); err != nil || r.SocketType != socketType {
		t.Fatalf("INITIATE metadata: %+v %v", r, err)
	}
	ready, err := cs.ready(AppendProperty(nil, "Socket-Type", []byte(typ)))
	testutil.NoErr(t, err)
	if _, err := cc.ready(ready); err != nil {
		t.Fatal(err)
	}
	return cs, cc
}

// curveReplay works out in-process what a door makes of stream (built by
// build from a client handshaken with a server of its own): the reader
// zmq4 reads through, over the opener, as door.shake sets them up. It
// checks what would reach zmq4 and the receive budget, and returns how
// the reader ended and whether the probe PING was seen.
func curveReplay(t *testing.T, typ string, lim Limits, build func(cc *curveClient) []byte) (probed bool, end error) {
	t.Helper()
	cs, cc := curvePair(t, typ)
	stream := build(cc)

	sh := NewShared(lim, nil)
	subs := map[string]int{}
	in := &inbound{pub: typ == "PUB", lim: &sh.lim, budget: sh, hooks: inboundHooks{
		ping: func(ctx []byte) { probed = probed || bytes.Equal(ctx, fuzzProbe) },
		subscribe: func(topic []byte, on bool) error { // as conn.subscribe counts
			tp := string(topic)
			switch {
			case !on && subs[tp] > 1:
				subs[tp]--
			case !on:
				delete(subs, tp)
			default:
				if _, ok := subs[tp]; !ok && len(subs) >= sh.lim.MaxSubscriptions {
					return protoErr("more than %d subscriptions", sh.lim.MaxSubscriptions)
				}
				subs[tp]++
			}
			return nil
		}}}
	in.rd = bufio.NewReaderSize(bytes.NewReader(stream), readBuffer)
	in.open = &opener{rd: in.rd, cs: cs, lim: &sh.lim}
	got, rerr := readAll(in, 64<<20)
	if rerr == nil {
		t.Fatalf("the reader ended without an error after %d messages", len(got))
	}
	checkMessages(t, typ, got, &sh.lim)
	if sh.receiving.Load() != 0 {
		t.Fatalf("%d bytes left in the receive budget", sh.receiving.Load())
	}
	return probed, rerr
}

// FuzzCurveMessages sends, after a valid CURVE handshake with a ROUTER or
// PUB door, whatever the fuzzer makes: raw, or as frames the client seals
// (with any inner flags, tampered or not, nonces repeated or not). No
// panic; what the door makes of it is what the same reader makes of it
// in-process (where what would reach zmq4 is checked): a broken rule
// closes the connection, and a stream that breaks none leaves it open
// (its final PING is answered); and a client that was there all along,
// on each door, keeps working, with nothing left counted.
func FuzzCurveMessages(f *testing.F) {
	lim := fuzzLimits
	lim.PongQueue = 16 << 20 // a PONG is never withheld from the probe
	lim.HandshakeTimeout = 5 * time.Second
	router := bindCurveDoor(f, "ROUTER", lim, fuzzCurveKeys)
	pub := bindCurveDoor(f, "PUB", lim, fuzzCurveKeys)
	rb := dialCurve(f, router.addr, fuzzCurveKeys.Public)
	rb.mustHandshake(f, "DEALER", []byte("bystander"))
	// The ROUTER is read all along, as the relay reads it: messages the
	// fuzzed clients get through are dropped, the bystander's kept for its
	// round trip. (Unread, zmq4's queue fills and holds the door's reader
	// up, so a rule broken further on is never seen: a harness artifact.)
	byMsgs := make(chan zmq4.Msg, 16)
	go func() { // ends when the socket closes
		for {
			m, err := router.sock.Recv()
			if err != nil {
				return
			}
			if len(m.Frames) > 0 && string(m.Frames[0]) == "bystander" {
				select {
				case byMsgs <- m:
				default:
				}
			}
		}
	}()
	bystanderRoundTrip := func(t *testing.T) {
		token := fmt.Sprintf("ping at %d", time.Now().UnixNano())
		testutil.NoErr(t, rb.sendMsg([]byte("hello"), []byte(token)))
		for timeout := time.After(5 * time.Second); ; {
			select {
			case m := <-byMsgs:
				if len(m.Frames) != 3 || string(m.Frames[2]) != token {
					continue
				}
			case <-timeout:
				t.Fatal("the ROUTER got nothing from the bystander")
			}
			break
		}
		testutil.NoErr(t, router.sock.SendMulti(zmq4.NewMsgFrom([]byte("bystander"), []byte("reply"), []byte(token))))
		if r, err := rb.recvMessageWithin(5 * time.Second); err != nil || len(r) != 2 || string(r[1]) != token {
			t.Fatalf("the bystander got %s %v", brief(r), err)
		}
	}
	pb := dialCurve(f, pub.addr, fuzzCurveKeys.Public)
	pb.mustHandshake(f, "SUB", nil)
	testutil.NoErr(f, pb.sendMsg([]byte("\x01bystander.")))
	testutil.WaitFor(f, 5*time.Second, "the PUB bystander's subscription", func() bool { return len(pub.door.Topics()) == 1 })
	published := 0

	rec := func(ctl byte, body string) []byte { return append([]byte{ctl, byte(len(body))}, body...) }
	big := func(ctl, n byte) []byte { return []byte{ctl | recBig, n} }
	seed := func(ctl byte, rest ...[]byte) { f.Add(append([]byte{ctl}, bytes.Join(rest, nil)...)) }
	for _, door := range []byte{0, msgPub} {
		seed(door | msgSealed) // the probe alone
		seed(door|msgSealed, rec(0, "hello"))
		seed(door|msgSealed, rec(boxMore, "a"), rec(boxMore, ""), rec(0, "b"))
		seed(door|msgSealed, rec(boxMore, "a")) // the probe inside a message
		seed(door|msgSealed, rec(boxCommand, "\x04PING\x00\x00ab"))
		seed(door|msgSealed, rec(boxCommand, "\x04PONGab"))
		seed(door|msgSealed, rec(boxCommand, "\x05HELLO"))
		seed(door|msgSealed, rec(boxCommand|boxMore, "\x04PING\x00\x00"))
		seed(door|msgSealed, rec(boxCommand, ""))
		seed(door|msgSealed, rec(0x1C, "x")) // reserved inner flags: ignored
		seed(door|msgSealed, rec(recFlip, "abc"))
		seed(door|msgSealed, rec(0, "a"), rec(recSameNonc, "b"))
		seed(door|msgSealed, rec(recSameNonc, "a"))            // INITIATE's nonce
		seed(door|msgSealed, big(boxMore, 200), rec(0, "end")) // 100 KiB: staged
		seed(door|msgSealed, big(0, 255), big(recFlip, 255))
		seed(door|msgSealed, bytes.Repeat(big(boxMore, 255), 8), big(0, 255)) // over MaxMessage
		seed(door, message([]byte("plain")))
		seed(door, AppendPing(nil, []byte("ctx")))
		seed(door, binary.BigEndian.AppendUint64([]byte{FlagLong}, 1<<62))
		seed(door, []byte{0, 40}, []byte("\x07MESSAGE"), make([]byte, 32))
		seed(door, []byte{0, 40}, []byte("\x07MESSAGE"), make([]byte, 10)) // cut short: the door waits
	}
	seed(msgPub|msgSealed, rec(0, "\x01kernel."), rec(0, "\x01"), rec(0, "\x00kernel."))
	seed(msgPub|msgSealed, rec(0, "\x01a"), rec(0, "\x01b"), rec(0, "\x01c"), rec(0, "\x01d"), rec(0, "\x01e"))
	seed(msgPub|msgSealed, rec(0, "\x01a"), rec(0, "\x01a"), rec(0, "\x00a"), rec(0, "\x00a"), rec(0, "\x00a"))
	seed(msgPub|msgSealed, rec(boxCommand, "\x09SUBSCRIBEkernel."), rec(boxCommand, "\x06CANCELkernel."))
	seed(msgPub|msgSealed, rec(0, "\x01this topic is longer than MaxTopic: 32 b"))
	seed(msgPub|msgSealed, rec(boxMore, "\x01a"), rec(0, "b")) // not a subscription: dropped

	f.Fuzz(func(t *testing.T, data []byte) {
		var ctl byte
		if len(data) > 0 {
			ctl, data = data[0], data[1:]
		}
		b, typ, socketType, by := router, "ROUTER", "DEALER", rb
		if ctl&msgPub != 0 {
			b, typ, socketType, by = pub, "PUB", "SUB", pb
		}
		sealed := ctl&msgSealed != 0
		build := func(cc *curveClient) []byte {
			if sealed {
				return sealRecords(cc, data)
			}
			return data
		}
		probed, rerr := curveReplay(t, typ, lim, build)
		closes := errors.Is(rerr, ErrProtocol)

		p := dialCurve(t, b.addr, fuzzCurveKeys.Public)
		p.cc = fuzzCurveClient()
		p.mustHandshake(t, socketType, nil)
		_ = p.send(build(p.cc)) // the door may have closed already
		switch {
		case closes:
			if !p.closedWithin(3 * time.Second) {
				t.Fatalf("the door kept a connection that broke a rule: %v", rerr)
			}
		case sealed:
			if !probed {
				t.Fatalf("the stream ended cleanly (%v) without the probe", rerr)
			}
			// The door answers the probe: every frame it sends opens, with
			// a nonce above the last (recv checks).
			p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for {
				flags, body, err := p.recv()
				if err != nil {
					t.Fatalf("no PONG for the probe from a connection that broke no rule: %v", err)
				}
				if flags == boxCommand && bytes.Equal(body, append([]byte("\x04PONG"), fuzzProbe...)) {
					break
				}
			}
		default: // a raw stream cut short: the door waits for the rest
		}
		p.c.Close()

		// The door's other client is unaffected.
		if typ == "ROUTER" {
			bystanderRoundTrip(t)
		} else {
			published++
			topic := []byte("bystander." + string(rune('a'+published%26)))
			testutil.NoErr(t, b.sock.SendMulti(zmq4.NewMsgFrom(topic, []byte("news"))))
			if m, err := by.recvMessageWithin(5 * time.Second); err != nil || len(m) != 2 || !bytes.Equal(m[0], topic) {
				t.Fatalf("the PUB bystander got %s %v, want %s", brief(m), err, topic)
			}
		}
		waitConns(t, b, 1)
		// The door forgets a connection's topics just after the connection.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			ts := pub.door.Topics()
			if len(ts) == 1 && string(ts[0]) == "bystander." {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("PUB topics %q after the connection went, want only the bystander's", ts)
			}
		}
	})
}
