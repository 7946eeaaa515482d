package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

const identitiesID = "5f1c7a0e-0b7e-4d1e-9c55-3d2b1f7a9e02"

func ownerKey() string { return "uid:" + strconv.Itoa(os.Geteuid()) }

// The identities a supervisor leaves are what the next one of that kernel
// reads, expired ones dropped; the file is the user's own (0600), and
// nothing left means no file.
func TestIdentitiesRoundTrip(t *testing.T) {
	d, dir := openTestDir(t)
	now := time.Now()
	want := []Identity{
		{Socket: "shell", ID: "bobs-session", Peer: ownerKey(), Until: now.Add(30 * time.Second)},
		{Socket: "stdin", ID: "bobs-session", Peer: ownerKey(), Until: now.Add(30 * time.Second)},
		{Socket: "control", ID: "\xff\x01binary", Peer: "addr:10.0.0.5", Until: now.Add(5 * time.Second)},
		{Socket: "shell", ID: "another", Peer: "uid:4242", Until: now.Add(time.Second)},
	}
	expired := Identity{Socket: "shell", ID: "gone", Peer: ownerKey(), Until: now.Add(-time.Second)}
	if err := d.WriteIdentities(identitiesID, append(slices.Clone(want), expired), now); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, IdentitiesName(identitiesID))
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identities file: %v, %v; want mode 0600", fi, err)
	}
	got, err := d.ReadIdentities(identitiesID, now)
	testutil.NoErr(t, err)
	if !sameIdentities(got, want) {
		t.Fatalf("read back %+v\nwant %+v", got, want)
	}
	// Read later, what expired meanwhile is dropped.
	got, _ = d.ReadIdentities(identitiesID, now.Add(2*time.Second))
	if len(got) != 3 {
		t.Errorf("read 2 s later: %+v; want the entry kept 1 s dropped", got)
	}
	if got, err := d.ReadIdentities("11111111-0000-0000-0000-000000000000", now); got != nil || err != nil {
		t.Errorf("another kernel's identities: %+v, %v; want none", got, err)
	}
	if err := d.WriteIdentities(identitiesID, []Identity{expired}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("nothing left to keep, and the file is still there: %v", err)
	}
	if err := d.WriteIdentities("../x", want, now); err == nil {
		t.Error("WriteIdentities took a kernel id with a path in it")
	}
}

func sameIdentities(a, b []Identity) bool {
	key := func(e Identity) string { return fmt.Sprintf("%s %q %s %d", e.Socket, e.ID, e.Peer, e.Until.UnixNano()) }
	ka, kb := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		ka[i] = key(a[i])
	}
	for i := range b {
		kb[i] = key(b[i])
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}

// A flood of identities from other peers does not grow the file past its
// bounds, nor push the owner's out: each other peer keeps its latest
// identitiesPerPeer per socket, the owner all of its own, and the file at
// most identitiesMax.
func TestIdentitiesBounds(t *testing.T) {
	d, dir := openTestDir(t)
	now := time.Now()
	var ids []Identity
	for i := range 40 {
		ids = append(ids, Identity{Socket: "shell", ID: fmt.Sprintf("owner-%d", i), Peer: ownerKey(), Until: now.Add(time.Minute)})
	}
	// One other user, 200 made-up identities (long ones) on each socket.
	for _, sock := range []string{"shell", "control", "stdin"} {
		for i := range 200 {
			ids = append(ids, Identity{Socket: sock, ID: fmt.Sprintf("%0255d", i), Peer: "uid:4242",
				Until: now.Add(time.Second + time.Duration(i)*time.Millisecond)})
		}
	}
	read := func() map[string]int {
		t.Helper()
		got, err := d.ReadIdentities(identitiesID, now)
		testutil.NoErr(t, err)
		count := map[string]int{"all": len(got)}
		for _, e := range got {
			count[e.Socket+" "+e.Peer]++
			if e.Peer == "uid:4242" && e.Until.Before(now.Add(time.Second+136*time.Millisecond)) {
				t.Errorf("kept one of uid 4242's older identities (until %v) over a later one", e.Until)
			}
		}
		return count
	}
	if err := d.WriteIdentities(identitiesID, ids, now); err != nil {
		t.Fatal(err)
	}
	count := read()
	if n := count["shell "+ownerKey()]; n != 40 {
		t.Errorf("%d of the owner's 40 identities kept", n)
	}
	for _, sock := range []string{"shell", "control", "stdin"} {
		if n := count[sock+" uid:4242"]; n != identitiesPerPeer {
			t.Errorf("uid 4242 has %d identities on %s, want %d", n, sock, identitiesPerPeer)
		}
	}

	// Remote peers by the hundred (a peer per address): the file stays at
	// its cap, the owner's all in it, each peer's first before anyone's
	// second.
	for i := range 600 {
		ids = append(ids, Identity{Socket: "shell", ID: fmt.Sprintf("remote-%d", i), Peer: fmt.Sprintf("addr:10.0.%d.%d", i/250, i%250+1),
			Until: now.Add(time.Minute)})
	}
	if err := d.WriteIdentities(identitiesID, ids, now); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, IdentitiesName(identitiesID))); len(b) > maxStateFile/2 {
		t.Errorf("the file is %d bytes", len(b))
	}
	count = read()
	if count["all"] != identitiesMax || count["shell "+ownerKey()] != 40 {
		t.Errorf("%d entries, %d of the owner's; want the cap of %d with all 40 of the owner's", count["all"], count["shell "+ownerKey()], identitiesMax)
	}
	if n := count["shell uid:4242"]; n > 1 {
		t.Errorf("uid 4242 kept %d identities on shell while other peers had none", n)
	}
}

// What the file says is checked whole: one JSON object of the known
// fields, of that kernel, every entry within the bounds, or nothing.
func TestParseIdentities(t *testing.T) {
	now := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	owner := 1000
	entry := func(socket string, id []byte, peer string, until time.Time) identityJSON {
		return identityJSON{Socket: socket, ID: id, Peer: peer, Until: until}
	}
	enc := func(kernel string, es ...identityJSON) []byte {
		b, _ := json.Marshal(identitiesFile{Kernel: kernel, Identities: es})
		return b
	}
	soon := now.Add(30 * time.Second)
	good := entry("shell", []byte("s"), "uid:1000", soon)
	ids, err := ParseIdentities(enc(identitiesID, good, entry("hb", []byte("h"), "addr:::1", now.Add(-time.Second))), identitiesID, owner, now)
	if err != nil || len(ids) != 1 || ids[0].ID != "s" {
		t.Fatalf("ParseIdentities(good) = %+v, %v; want the unexpired entry", ids, err)
	}
	many := func(peer string, n int) []identityJSON {
		var es []identityJSON
		for i := range n {
			es = append(es, entry("shell", []byte(strconv.Itoa(i)), peer, soon))
		}
		return es
	}
	if _, err := ParseIdentities(enc(identitiesID, many("uid:1000", identitiesMax)...), identitiesID, owner, now); err != nil {
		t.Errorf("the owner's %d identities on one socket: %v", identitiesMax, err)
	}
	bad := map[string][]byte{
		"empty":           nil,
		"not json":        []byte("shell s uid:1000"),
		"extra field":     []byte(`{"kernel":"` + identitiesID + `","identities":[],"cmd":"rm"}`),
		"extra in entry":  []byte(`{"kernel":"` + identitiesID + `","identities":[{"socket":"shell","id":"cw==","peer":"uid:1","until":"2026-12-04T18:00:10Z","x":1}]}`),
		"two values":      append(enc(identitiesID, good), enc(identitiesID, good)...),
		"another kernel":  enc("11111111-0000-0000-0000-000000000000", good),
		"iopub":           enc(identitiesID, entry("iopub", []byte("s"), "uid:1", soon)),
		"no identity":     enc(identitiesID, entry("shell", nil, "uid:1", soon)),
		"a zero byte":     enc(identitiesID, entry("shell", []byte("\x00abc"), "uid:1", soon)),
		"256 bytes":       enc(identitiesID, entry("shell", []byte(strings.Repeat("x", 256)), "uid:1", soon)),
		"a connection":    enc(identitiesID, entry("shell", []byte("s"), "conn:3", soon)),
		"uid 01":          enc(identitiesID, entry("shell", []byte("s"), "uid:01", soon)),
		"uid -1":          enc(identitiesID, entry("shell", []byte("s"), "uid:-1", soon)),
		"uid 2^32":        enc(identitiesID, entry("shell", []byte("s"), "uid:4294967296", soon)),
		"addr not an IP":  enc(identitiesID, entry("shell", []byte("s"), "addr:host", soon)),
		"addr unwritten":  enc(identitiesID, entry("shell", []byte("s"), "addr:0:0::1", soon)),
		"no until":        enc(identitiesID, entry("shell", []byte("s"), "uid:1", time.Time{})),
		"a year ahead":    enc(identitiesID, entry("shell", []byte("s"), "uid:1", now.AddDate(1, 0, 0))),
		"twice":           enc(identitiesID, good, good),
		"a peer's flood":  enc(identitiesID, many("uid:4242", identitiesPerPeer+1)...),
		"over the cap":    enc(identitiesID, many("uid:1000", identitiesMax+1)...),
		"control in peer": enc(identitiesID, entry("shell", []byte("s"), "uid:1\n", soon)),
	}
	for name, b := range bad {
		if got, err := ParseIdentities(b, identitiesID, owner, now); err == nil || !errors.Is(err, ErrRefused) {
			t.Errorf("%s: ParseIdentities = %+v, %v; want refused", name, got, err)
		}
	}
}

// Planted identities files (a link, another user's file, a FIFO, one that
// does not parse) are refused and removed; what a link points to is
// neither read nor removed.
func TestPlantedIdentitiesAreRefused(t *testing.T) {
	requireRootUser(t)
	d, dir := openTestDir(t)
	now := time.Now()
	good, _ := json.Marshal(identitiesFile{Kernel: identitiesID,
		Identities: []identityJSON{{Socket: "shell", ID: []byte("planted"), Peer: "uid:4242", Until: now.Add(time.Minute)}}})
	garbage := map[string]func(p string){"garbage": func(p string) { os.WriteFile(p, []byte("{"), 0o600) }}
	checkPlanted(t, filepath.Join(dir, IdentitiesName(identitiesID)), good, garbage, true, func(how string) {
		if got, err := d.ReadIdentities(identitiesID, now); got != nil || err == nil {
			t.Errorf("%s: ReadIdentities = %+v, %v; want refused", how, got, err)
		}
	})
}

// The sweep removes what no supervisor will take: the files of kernels
// with neither a live supervisor nor a waiting standby, expired or not
// (a next supervisor reads its kernel's file before its own sweep), and
// broken ones; the caller's own kernel's file is its to keep.
func TestSweepIdentities(t *testing.T) {
	d, dir := openTestDir(t)
	now := time.Now()
	keep, live, waiting, fresh, stale, broken := "k-keep", "k-live", "k-waiting", "k-fresh", "k-stale", "k-broken"
	for _, id := range []string{keep, live, stale} {
		if err := d.WriteIdentities(id, []Identity{{Socket: "shell", ID: "s", Peer: ownerKey(), Until: now.Add(time.Second)}}, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{fresh, waiting} {
		d.WriteIdentities(id, []Identity{{Socket: "shell", ID: "s", Peer: ownerKey(), Until: now.Add(time.Minute)}}, now)
	}
	os.WriteFile(filepath.Join(dir, IdentitiesName(broken)), []byte("{"), 0o600)
	writeStateIn(t, dir, State{KernelID: live, SupervisorPID: os.Getpid(), Owner: os.Geteuid()})
	self, _ := proc.StartTime(os.Getpid())
	if err := d.WriteSpare(Spare{KernelID: waiting, StandbyPID: os.Getpid(), StandbyStart: self, PID: os.Getpid(), Start: self}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(2 * time.Second) // keep's, live's and stale's entries have expired
	if n := d.SweepIdentities(keep, later); n != 3 {
		t.Errorf("SweepIdentities = %d, want 3 (the fresh, the stale and the broken file)", n)
	}
	for id, want := range map[string]bool{keep: true, live: true, waiting: true, fresh: false, stale: false, broken: false} {
		_, err := os.Lstat(filepath.Join(dir, IdentitiesName(id)))
		if (err == nil) != want {
			t.Errorf("%s: there after the sweep: %v, want %v", id, err == nil, want)
		}
	}
}

// FuzzParseIdentities: any bytes from an identities file are refused or
// give entries within the bounds ParseIdentities promises, never a panic.
func FuzzParseIdentities(f *testing.F) {
	now := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	good, _ := json.Marshal(identitiesFile{Kernel: identitiesID, Identities: []identityJSON{
		{Socket: "shell", ID: []byte("bobs-session"), Peer: "uid:1000", Until: now.Add(30 * time.Second)},
		{Socket: "stdin", ID: []byte{0xff, 0}, Peer: "addr:10.0.0.5", Until: now.Add(time.Minute)},
	}})
	f.Add(good)
	f.Add([]byte(`{"kernel":"` + identitiesID + `","identities":[{"socket":"shell","id":"AA==","peer":"uid:1","until":"2026-12-04T18:00:10Z"}]}`))
	f.Add([]byte(`{"kernel":"` + identitiesID + `","identities":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := ParseIdentities(b, identitiesID, 1000, now)
		if err != nil {
			return
		}
		if len(ids) > identitiesMax {
			t.Fatalf("accepted %d entries", len(ids))
		}
		seen := map[string]bool{}
		for _, e := range ids {
			if checkIdentity(e, now) != nil || !e.Until.After(now) || seen[e.Socket+"\x00"+e.ID] {
				t.Fatalf("accepted %+v", e)
			}
			seen[e.Socket+"\x00"+e.ID] = true
		}
	})
}
