package relay

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

// A correctly signed request seen before (same signature) is relayed as
// any message is, but the supervisor acts on it once; forged ones cost the
// log a line per interval, not a line each.
func TestReplaysAndForgeriesAreNotActedOn(t *testing.T) {
	signer, err := jmsg.NewSigner("hmac-sha256", "replay-key")
	testutil.NoErr(t, err)
	var log testutil.Buffer
	lg := slog.New(slog.NewTextHandler(&log, nil))
	r := &Relay{log: lg, signer: signer, history: newDigestHistory(3), warnPeer: zmtp.RateLimitedWarn(lg, time.Minute)}
	msg := func(n int) [][]byte {
		f, _ := jmsg.NewMessage(signer, [][]byte{[]byte("client")}, "execute_request", nil, "s", map[string]any{"code": fmt.Sprint(n)})
		return f
	}
	first := msg(1)
	if _, ok := r.request(first, "execute_request"); !ok {
		t.Fatal("a fresh signed request was not accepted")
	}
	for range 1000 {
		if _, ok := r.request(cloneFrames(first), "execute_request"); ok {
			t.Fatal("a replayed request was accepted")
		}
	}
	for i := range 1000 {
		f := msg(100 + i)
		p, _ := jmsg.Split(f)
		p.Signature[0] ^= 1
		if _, ok := r.request(f, "execute_request"); ok {
			t.Fatal("a forged request was accepted")
		}
	}
	out := log.String()
	if n := strings.Count(out, "replayed"); n != 1 {
		t.Errorf("%d log lines about 2000 replays, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "bad signature"); n != 1 {
		t.Errorf("%d log lines about 1000 forgeries, want 1:\n%s", n, out)
	}
	// The history is bounded: the oldest signatures are forgotten.
	for i := range 5 {
		r.request(msg(10+i), "execute_request")
	}
	if len(r.history.seen) != 3 || len(r.history.ring) != 3 {
		t.Errorf("history holds %d (ring %d), want 3", len(r.history.seen), len(r.history.ring))
	}
	// Without a key nothing is signed, and nothing is a replay.
	none, _ := jmsg.NewSigner("hmac-sha256", "")
	r = &Relay{log: lg, signer: none, history: newDigestHistory(3), warnPeer: r.warnPeer}
	f, _ := jmsg.NewMessage(none, nil, "execute_request", nil, "s", map[string]any{})
	for range 3 {
		if _, ok := r.request(cloneFrames(f), "execute_request"); !ok {
			t.Fatal("an unsigned request (empty key) was refused as a replay")
		}
	}
}

// Warnings for the next cell accumulate until it runs: a later one does
// not replace an earlier one (the start's warning, then the GPU limit's).
func TestWarningsForTheNextCellAccumulate(t *testing.T) {
	r := &Relay{}
	r.WarnNextCell("k", "tfgpu-kernel: the previous kernel stopped.\n")
	r.WarnNextCell("k", "tfgpu-kernel: GPU memory still held.")
	r.WarnNextCell("k", "tfgpu-kernel: 93% of its limit.\n")
	want := "tfgpu-kernel: the previous kernel stopped.\ntfgpu-kernel: GPU memory still held.\ntfgpu-kernel: 93% of its limit.\n"
	if r.warning != want || r.warnID != "k" {
		t.Fatalf("pending warning %q (kernel %q), want %q", r.warning, r.warnID, want)
	}
}
