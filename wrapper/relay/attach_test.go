package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

// A client's request that came while the supervisor was still starting
// (queued in the outer socket before the relay exists) goes to the kernel
// once the relay starts, and is answered by the kernel: not taken for a
// parked kernel's and answered by the relay (it was, when the outer pumps
// started before the first kernel was attached).
//
// The request is in the outer socket before New (the door has handed the
// connection to the socket, the request is written); whether a pump New
// started too early would take it before the kernel is attached is a race
// of two goroutines, so the test runs it rounds times: on the old order
// (pumps, then the kernel) about a third of the rounds failed.
func TestRequestsBeforeTheRelayGoToTheKernel(t *testing.T) {
	const rounds = 20
	for i := range rounds {
		if !t.Run(fmt.Sprint(i), requestBeforeTheRelay) {
			break
		}
	}
}

func requestBeforeTheRelay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signer, err := jmsg.NewSigner("hmac-sha256", "attach-key")
	testutil.NoErr(t, err)
	kernel, inner := kernelSockets(t, ctx, "attach-key")
	go func() { // the kernel answers kernel_info on shell
		for {
			m, err := kernel[jmsg.Shell].Recv()
			if err != nil {
				return
			}
			p, err := jmsg.Split(m.Frames)
			if err != nil {
				continue
			}
			reply, _ := jmsg.NewMessage(signer, p.Idents, "kernel_info_reply", p.Header, "kernel",
				map[string]any{"status": "ok", "implementation": "the kernel"})
			_ = kernel[jmsg.Shell].SendMulti(zmq4.NewMsgFrom(reply...))
		}
	}()
	lg := slog.New(slog.DiscardHandler)
	outer, err := Bind(&jmsg.ConnInfo{Transport: "tcp", IP: "127.0.0.1"}, zmtp.NewShared(zmtp.Limits{}, lg))
	testutil.NoErr(t, err)
	defer outer.Close()

	client := zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity("early-client")))
	defer client.Close()
	testutil.NoErr(t, client.Dial("tcp://"+outer.doors[jmsg.Shell].Addr().String()))
	// The connection is the outer socket's (the door's handshake ended),
	// and the request is written to it: it waits in the outer socket.
	testutil.WaitFor(t, 10*time.Second, "the client's connection on the outer socket", func() bool {
		e, _ := outer.doors[jmsg.Shell].Conns()
		return e == 1
	})
	req, _ := jmsg.NewMessage(signer, nil, "kernel_info_request", nil, "client", map[string]any{})
	testutil.NoErr(t, client.SendMulti(zmq4.NewMsgFrom(req...)))

	r := New(ctx, outer, inner, signer, make(chan Event, 16), Hooks{}, lg)
	defer r.CloseInner()
	got := make(chan zmq4.Msg, 1)
	go func() {
		if m, err := client.Recv(); err == nil {
			got <- m
		}
	}()
	select {
	case m := <-got:
		p, err := jmsg.Split(m.Frames)
		var c struct{ Implementation string }
		if err == nil {
			_ = json.Unmarshal(p.Content, &c)
		}
		if c.Implementation != "the kernel" {
			t.Fatalf("the early request was answered by %q, not the kernel", c.Implementation)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the early request was not answered")
	}
}
