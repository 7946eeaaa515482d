package record

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Routing identities across a restart (docs/local-peers.md, issue 32): a
// kernel's supervisor leaves in <state dir>/<kernel id>.identities who owns
// which routing identity on its ROUTER sockets (zmtp.Shared.Owned), and
// the next supervisor of that kernel reads it before it binds the ports,
// so another user cannot claim a client's identity in the ~100 ms before
// the client reconnects. The file is written by rename as the supervisor
// stops, and while it runs when the identities held change (so that a
// SIGKILL leaves it too); it is read back only by the same user's
// supervisor of the same kernel id, through Dir.read's checks, and parsed
// strictly: what a local peer made up is in it (the identities, up to the
// bounds below), so it is treated as untrusted all the same.

// An Identity is one routing identity and the peer that owns it until
// Until: zmtp.Owned, field for field.
type Identity struct {
	Socket string    // the ROUTER socket: shell, control, stdin or hb
	ID     string    // the identity as the client claimed it: 1 to 255 bytes, not starting with a zero byte
	Peer   string    // "uid:N", or "addr:IP" for a remote client
	Until  time.Time // until when another peer's claim is refused
}

// Bounds of an identities file. Any local user can make up identities
// (each claim is a connection, and one that drops leaves a reservation),
// so what goes into the file is rationed per peer, and the kernel owner's
// own go in first: another user can add at most identitiesPerPeer per
// socket, and never push out the owner's. At most identitiesMax entries
// of at most ~480 bytes each keep the file under a quarter of maxStateFile.
const (
	identitiesMax     = 512
	identitiesPerPeer = 64
	identityMaxLen    = 255 // a ZMTP identity's bound (RFC 23)
	// identityMaxAhead bounds how far ahead an entry's Until may lie: the
	// supervisor writes at most its reserve time plus its refresh period
	// (wrapper/identities.go) ahead; a later one was not written by it.
	identityMaxAhead = 10 * time.Minute
)

// IdentitiesName is the file of kernel id's identities.
func IdentitiesName(id string) string { return id + ".identities" }

type identitiesFile struct {
	Kernel     string         `json:"kernel"`
	Identities []identityJSON `json:"identities"`
}

type identityJSON struct {
	Socket string    `json:"socket"`
	ID     []byte    `json:"id"` // base64: an identity is any bytes
	Peer   string    `json:"peer"`
	Until  time.Time `json:"until"`
}

// WriteIdentities replaces kernel id's identities file with ids: those
// not expired at now, within the bounds (the owner's first, then at most
// identitiesPerPeer of each other peer per socket, the latest Until first),
// each valid as ParseIdentities checks. With nothing left the file is
// removed.
func (d *Dir) WriteIdentities(id string, ids []Identity, now time.Time) error {
	if !ValidKernelID(id) {
		return fmt.Errorf("%q: not a kernel id", id)
	}
	ids = boundIdentities(ids, "uid:"+strconv.Itoa(d.uid), now)
	if len(ids) == 0 {
		return d.remove(IdentitiesName(id))
	}
	f := identitiesFile{Kernel: id, Identities: make([]identityJSON, len(ids))}
	for i, e := range ids {
		f.Identities[i] = identityJSON{Socket: e.Socket, ID: []byte(e.ID), Peer: e.Peer, Until: e.Until.UTC()}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return d.write(IdentitiesName(id), append(b, '\n'))
}

// boundIdentities keeps the valid entries of ids not expired at now, one
// per socket and identity, within the bounds, owner's first.
func boundIdentities(ids []Identity, owner string, now time.Time) []Identity {
	var valid []Identity
	for _, e := range ids {
		if checkIdentity(e, now) == nil && e.Until.After(now) {
			valid = append(valid, e)
		}
	}
	// Each peer's entries on a socket ranked by Until, latest first; then
	// the owner's, then everyone else's by rank: a peer with many fills
	// last.
	slices.SortFunc(valid, func(a, b Identity) int {
		return cmp.Or(cmp.Compare(a.Socket, b.Socket), cmp.Compare(a.Peer, b.Peer), b.Until.Compare(a.Until), cmp.Compare(a.ID, b.ID))
	})
	type ranked struct {
		Identity
		rank int // -1: the owner's
	}
	var all []ranked
	seen := map[[2]string]bool{}
	count := map[[2]string]int{}
	for _, e := range valid {
		k := [2]string{e.Socket, e.ID}
		if seen[k] {
			continue
		}
		seen[k] = true
		rank := -1
		if e.Peer != owner {
			g := [2]string{e.Socket, e.Peer}
			if rank = count[g]; rank >= identitiesPerPeer {
				continue
			}
			count[g]++
		}
		all = append(all, ranked{e, rank})
	}
	slices.SortStableFunc(all, func(a, b ranked) int { return cmp.Compare(a.rank, b.rank) })
	out := make([]Identity, 0, min(len(all), identitiesMax))
	for _, r := range all[:min(len(all), identitiesMax)] {
		out = append(out, r.Identity)
	}
	return out
}

// ReadIdentities returns the identities kernel id's previous supervisor
// left that have not expired at now; none and no error when there is no
// file. A file that does not check out (Dir.read's checks, ParseIdentities)
// is removed, and its error returned. The file itself stays: the caller's
// doors are not bound yet, and should they fail to, the next try reads it.
func (d *Dir) ReadIdentities(id string, now time.Time) ([]Identity, error) {
	if !ValidKernelID(id) {
		return nil, nil
	}
	b, err := d.read(IdentitiesName(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err == nil {
		var ids []Identity
		if ids, err = ParseIdentities(b, id, d.uid, now); err == nil {
			return ids, nil
		}
	}
	_ = d.remove(IdentitiesName(id))
	return nil, fmt.Errorf("identities of kernel %s: %w", id, err)
}

// ParseIdentities reads an identities file of kernel id in a directory of
// owner: one JSON object of the known fields naming that kernel, at most
// identitiesMax entries, each on a ROUTER socket, with an identity a
// client can claim, a peer key a door makes, and an Until no later than
// identityMaxAhead after now; no identity twice on a socket; at most
// identitiesPerPeer of one peer per socket but the owner's. Anything else
// refuses the whole file (ErrRefused). Entries expired at now are dropped.
func ParseIdentities(b []byte, id string, owner int, now time.Time) ([]Identity, error) {
	var f identitiesFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: not an identities file: %v: %w", IdentitiesName(id), err, ErrRefused)
	}
	switch {
	case dec.More():
		return nil, fmt.Errorf("%s: data after the identities: %w", IdentitiesName(id), ErrRefused)
	case f.Kernel != id:
		return nil, fmt.Errorf("%s names kernel %q: %w", IdentitiesName(id), Printable(f.Kernel), ErrRefused)
	case len(f.Identities) > identitiesMax:
		return nil, fmt.Errorf("%s: %d identities, more than %d: %w", IdentitiesName(id), len(f.Identities), identitiesMax, ErrRefused)
	}
	ownerKey := "uid:" + strconv.Itoa(owner)
	seen := map[[2]string]bool{}
	perPeer := map[[2]string]int{}
	var out []Identity
	for i, j := range f.Identities {
		e := Identity{Socket: j.Socket, ID: string(j.ID), Peer: j.Peer, Until: j.Until}
		if err := checkIdentity(e, now); err != nil {
			return nil, fmt.Errorf("%s: entry %d: %v: %w", IdentitiesName(id), i, err, ErrRefused)
		}
		k := [2]string{e.Socket, e.ID}
		if seen[k] {
			return nil, fmt.Errorf("%s: entry %d: an identity twice on %s: %w", IdentitiesName(id), i, e.Socket, ErrRefused)
		}
		seen[k] = true
		if p := [2]string{e.Socket, e.Peer}; e.Peer != ownerKey {
			if perPeer[p]++; perPeer[p] > identitiesPerPeer {
				return nil, fmt.Errorf("%s: more than %d identities of one peer on %s: %w", IdentitiesName(id), identitiesPerPeer, e.Socket, ErrRefused)
			}
		}
		if e.Until.After(now) {
			out = append(out, e)
		}
	}
	return out, nil
}

// checkIdentity says what is wrong with e, if anything.
func checkIdentity(e Identity, now time.Time) error {
	switch {
	case e.Socket != "shell" && e.Socket != "control" && e.Socket != "stdin" && e.Socket != "hb":
		return fmt.Errorf("socket %q is none of shell, control, stdin, hb", Printable(e.Socket))
	case e.ID == "" || len(e.ID) > identityMaxLen || e.ID[0] == 0:
		return fmt.Errorf("an identity of %d bytes no client can claim", len(e.ID))
	case !validPeerKey(e.Peer):
		return fmt.Errorf("peer %q is no uid:N or addr:IP", Printable(e.Peer))
	case e.Until.IsZero():
		return errors.New("no until")
	case e.Until.After(now.Add(identityMaxAhead)):
		return fmt.Errorf("until %s, more than %s ahead", e.Until.Format(time.RFC3339), identityMaxAhead)
	}
	return nil
}

// validPeerKey: "uid:N" with N a uid as strconv writes it, or "addr:IP"
// with IP as net.IP writes it; what zmtp's peerOf makes and can carry.
func validPeerKey(k string) bool {
	if v, ok := strings.CutPrefix(k, "uid:"); ok {
		n, err := strconv.ParseUint(v, 10, 32)
		return err == nil && strconv.FormatUint(n, 10) == v
	}
	if v, ok := strings.CutPrefix(k, "addr:"); ok {
		ip := net.ParseIP(v)
		return ip != nil && ip.String() == v
	}
	return false
}

// SweepIdentities removes the identities files no supervisor will take:
// those of other kernels than keep (the caller's, read as it bound its
// ports) that have neither a live supervisor nor a waiting standby here.
// A kernel's next supervisor reads its file as it binds, before its own
// sweep, within a second of the last one's end (jupyter_client launches
// it at once; its restarter within 3 s of a death); so a sweep only takes
// a file from that kernel when another kernel starts in this directory in
// that very moment (then the next supervisor starts with no identities
// kept, as before #32). What a kernel left as it ended for good (a SIGKILL
// after a shutdown, a scancel) goes with the next start of any kernel
// here, as its record does. Files that are not the directory owner's are
// not its to judge. It returns how many went.
func (d *Dir) SweepIdentities(keep string, now time.Time) int {
	n := 0
	names, _ := d.names(".identities")
	for _, name := range names {
		id := strings.TrimSuffix(name, ".identities")
		if id == keep || !ValidKernelID(id) || d.liveRecord(id) || d.ReadSpare(id) != nil {
			continue
		}
		if _, err := d.read(name); err != nil {
			continue // not the owner's regular file: not ours to judge
		}
		if d.remove(name) == nil {
			n++
		}
	}
	return n
}
