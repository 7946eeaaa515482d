package wrapper

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

// identitiesOf reads what the supervisor of h's kernel left for the next
// one (nil: no file).
func identitiesOf(t *testing.T, h *harness, now time.Time) []record.Identity {
	t.Helper()
	d, err := record.OpenDir(os.Getenv("TFGPU_STATE_DIR"), false, false)
	testutil.NoErr(t, err)
	defer d.Close()
	ids, err := d.ReadIdentities(jmsg.KernelID(h.path), now)
	testutil.NoErr(t, err)
	return ids
}

// clientIdentities are the harness client's entries (shell and stdin).
func clientIdentities(t *testing.T, ids []record.Identity) []record.Identity {
	var out []record.Identity
	for _, e := range ids {
		if e.ID == "client-"+t.Name() && e.Peer == "uid:"+strconv.Itoa(os.Geteuid()) {
			out = append(out, e)
		}
	}
	return out
}

// As the supervisor stops, the identities its clients hold are left for
// the next one, kept for ReserveFor from the stop.
func TestIdentitiesAreLeftAtTheStop(t *testing.T) {
	h := startHarness(t)
	h.send(h.control, "shutdown_request", nil, map[string]any{"restart": true})
	if typ, _ := h.reply(h.control, 5*time.Second); typ != "shutdown_reply" {
		t.Fatalf("control got %q, want shutdown_reply", typ)
	}
	before := time.Now()
	if code := h.exitCode(10 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	ids := clientIdentities(t, identitiesOf(t, h, before))
	if len(ids) != 2 {
		t.Fatalf("the client's identities left: %+v; want shell and stdin\n%s", ids, h.stderr)
	}
	for _, e := range ids {
		if e.Until.After(time.Now().Add(zmtp.ReserveFor)) || e.Until.Before(before.Add(zmtp.ReserveFor-5*time.Second)) {
			t.Errorf("%s kept until %v; want ReserveFor after the stop (%v)", e.Socket, e.Until, before)
		}
	}
}

// A SIGKILLed supervisor has no stop: the file it kept current while it
// ran keeps its clients' identities for at least ReserveFor.
func TestIdentitiesSurviveASIGKILL(t *testing.T) {
	h, cmd := startExternal(t, "")
	testutil.WaitFor(t, 20*time.Second, "the client's identities written", func() bool {
		return len(clientIdentities(t, identitiesOf(t, h, time.Now()))) == 2
	})
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed := time.Now()
	ids := clientIdentities(t, identitiesOf(t, h, killed))
	if len(ids) != 2 {
		t.Fatalf("after the SIGKILL the file keeps %+v; want shell and stdin", ids)
	}
	for _, e := range ids {
		if e.Until.Before(killed.Add(zmtp.ReserveFor)) || e.Until.After(killed.Add(identityRefresh+zmtp.ReserveFor)) {
			t.Errorf("%s kept until %v; want between ReserveFor and identityRefresh+ReserveFor after the kill", e.Socket, e.Until)
		}
	}
}

// The next supervisor binds its doors with what the file says: another
// peer's identity is refused to this one (the test's uid), expired
// entries are dropped, and the file it keeps from then on still holds the
// kept identity for its owner.
func TestIdentitiesAreKeptByTheNextSupervisor(t *testing.T) {
	h := newHarness(t, "") // the connection file and state directory, nothing started
	d, err := record.OpenDir(os.Getenv("TFGPU_STATE_DIR"), false, false)
	testutil.NoErr(t, err)
	defer d.Close()
	now := time.Now()
	other := "uid:4242"
	if err := d.WriteIdentities(jmsg.KernelID(h.path), []record.Identity{
		{Socket: "shell", ID: "alices-session", Peer: other, Until: now.Add(time.Minute)},
		{Socket: "shell", ID: "expired", Peer: other, Until: now.Add(time.Millisecond)},
	}, now); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(now.Add(2 * time.Millisecond)) { // the event: the short entry expired
		time.Sleep(time.Millisecond)
	}
	h = startHarness(t) // a new connection file of the same kernel id
	if !strings.Contains(h.stderr.String(), "routing identities kept") || !strings.Contains(h.stderr.String(), "identities=1") {
		t.Errorf("the supervisor does not say it kept one identity:\n%s", h.stderr)
	}
	thief := zmq4.NewDealer(t.Context(), zmq4.WithID(zmq4.SocketIdentity("alices-session")))
	defer thief.Close()
	_ = thief.Dial(h.ci.Endpoint(jmsg.Shell)) // refused: zmq4 may or may not report it
	testutil.WaitFor(t, 20*time.Second, "the door's refusal, logged", func() bool {
		return strings.Contains(h.stderr.String(), "claiming the identity of a client that is reconnecting")
	})
	free := zmq4.NewDealer(t.Context(), zmq4.WithID(zmq4.SocketIdentity("expired")))
	defer free.Close()
	testutil.NoErr(t, free.Dial(h.ci.Endpoint(jmsg.Shell)))
	testutil.WaitFor(t, 20*time.Second, "the new supervisor's file: the kept identity still the other peer's, the expired one taken", func() bool {
		var kept, took bool
		for _, e := range identitiesOf(t, h, time.Now()) {
			kept = kept || e.ID == "alices-session" && e.Peer == other
			took = took || e.ID == "expired" && e.Peer == "uid:"+strconv.Itoa(os.Geteuid())
		}
		return kept && took
	})
}
