package jmsg

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
)

// Endpoint is the ZeroMQ address of ch, built as jupyter_client does, except that an
// IPv6 literal is bracketed ("tcp://[::1]:5555"), which both libzmq and Go's net need.
// ipc endpoints are "ipc://<ip>-<port>": the ip field is a socket-file path prefix.
func (c *ConnInfo) Endpoint(ch Channel) string {
	port := strconv.Itoa(c.Ports[ch])
	if c.Transport == "ipc" {
		return "ipc://" + c.IP + "-" + port
	}
	return "tcp://" + net.JoinHostPort(c.IP, port)
}

// knownFields is jupyter_client's write order (connect.write_connection_file).
var knownFields = []string{"shell_port", "iopub_port", "stdin_port", "control_port",
	"hb_port", "ip", "key", "transport", "signature_scheme", "kernel_name"}

// Marshal validates c and encodes it as jupyter_client does (same names, same order,
// two-space indent), followed by Extra's fields in sorted order.
func (c *ConnInfo) Marshal() ([]byte, error) {
	if err := c.validate(""); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	put := func(name string, v any) error {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(name)) // known names and map keys below are plain
		b.WriteByte(':')
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.Write(raw)
		return nil
	}
	vals := []any{c.Ports[Shell], c.Ports[IOPub], c.Ports[Stdin], c.Ports[Control],
		c.Ports[HB], c.IP, c.Key, c.Transport, c.SignatureScheme, c.KernelName}
	for i, name := range knownFields {
		if err := put(name, vals[i]); err != nil {
			return nil, fmt.Errorf("encode connection info field %q: %w", name, err)
		}
	}
	extra := make([]string, 0, len(c.Extra))
	for name := range c.Extra {
		if i := sort.SearchStrings(sortedKnown, name); i < len(sortedKnown) && sortedKnown[i] == name {
			return nil, fmt.Errorf("encode connection info: Extra field %q shadows a known field", name)
		}
		extra = append(extra, name)
	}
	sort.Strings(extra)
	for _, name := range extra {
		b.WriteByte(',')
		k, _ := json.Marshal(name) // escapes whatever a map key holds
		b.Write(k)
		b.WriteByte(':')
		if err := json.Compact(&b, c.Extra[name]); err != nil {
			return nil, fmt.Errorf("encode connection info field %q: %w", name, err)
		}
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("encode connection info: %w", err)
	}
	return out.Bytes(), nil
}

var sortedKnown = func() []string {
	s := append([]string(nil), knownFields...)
	sort.Strings(s)
	return s
}()

// WriteFile writes c to path atomically: a temporary file in the same directory, made
// 0600 by os.CreateTemp before any byte is written, synced, then renamed over path.
// The key is therefore never readable by others, not even while the file is written.
func WriteFile(path string, c *ConnInfo) error {
	data, err := c.Marshal()
	if err != nil {
		return fmt.Errorf("write connection file %s: %w", path, err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write connection file %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// CreateTemp already uses 0600; Chmod makes it explicit and independent of it.
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("write connection file %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write connection file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write connection file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write connection file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write connection file %s: %w", path, err)
	}
	ok = true
	return nil
}

// kernelIDRe is what a cgroup or state-file name may safely hold; Jupyter's ids are
// UUIDs, so anything else falls back to the hash.
var kernelIDRe = regexp.MustCompile(`^kernel-([A-Za-z0-9][A-Za-z0-9._-]*)\.json$`)

// KernelID is the kernel's stable identity: the <id> of a "kernel-<id>.json" basename
// (Jupyter reuses the file across restarts), else the first 12 hex digits of the
// SHA-256 of the cleaned absolute path. Symlinks are not resolved: Jupyter passes the
// same path string on every restart.
func KernelID(path string) string {
	if m := kernelIDRe.FindStringSubmatch(filepath.Base(path)); m != nil {
		return m[1]
	}
	abs, err := filepath.Abs(path)
	if err != nil { // only when the working directory is gone
		abs = filepath.Clean(path)
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:6])
}

// String describes c without its key.
func (c ConnInfo) String() string {
	return fmt.Sprintf("ConnInfo{transport=%s ip=%s ports=%v key=%s scheme=%s kernel=%s extra=%d}",
		c.Transport, c.IP, c.Ports, redact(c.Key), c.SignatureScheme, c.KernelName, len(c.Extra))
}

// GoString covers %#v, which would otherwise print every field, the key included.
func (c ConnInfo) GoString() string { return "jmsg." + c.String() }

// LogValue lets slog log a ConnInfo without its key.
func (c ConnInfo) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("transport", c.Transport),
		slog.String("ip", c.IP),
		slog.Any("ports", c.Ports[:]),
		slog.String("key", redact(c.Key)),
		slog.String("signature_scheme", c.SignatureScheme),
		slog.String("kernel_name", c.KernelName),
	)
}

// redact says whether there is a key, which is what a person debugging needs.
func redact(key string) string {
	if key == "" {
		return "(empty)"
	}
	return "(redacted)"
}
