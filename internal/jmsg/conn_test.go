package jmsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// testKey is the key in the hand-written testdata/conn files.
const testKey = "s3cr3t-k3y-0123456789abcdef"

func TestParseErrors(t *testing.T) {
	const schemes = "(want one of hmac-sha256, hmac-sha1, hmac-md5, hmac-sha512, hmac-sha384, hmac-sha224)"
	tests := []struct {
		name, file, field, want string
	}{
		{"empty file", "bad-empty.json", "", "empty file"},
		{"truncated", "bad-truncated.json", "", "not valid JSON: unexpected end of JSON input (at byte 57)"},
		{"syntax", "bad-syntax.json", "", `not valid JSON: invalid character '"' after object key:value pair (at byte 20)`},
		{"array", "bad-array.json", "", "not a JSON object"},
		{"null", "bad-null.json", "", "not a JSON object"},
		{"missing port", "bad-missing-shell-port.json", "shell_port", "missing"},
		{"port zero", "bad-port-zero.json", "iopub_port", "want an integer 1..65535, got 0"},
		{"port too big", "bad-port-too-big.json", "hb_port", "want an integer 1..65535, got 70000"},
		{"port string", "bad-port-string.json", "shell_port", `want an integer 1..65535, got "5001"`},
		{"port float", "bad-port-float.json", "stdin_port", "want an integer 1..65535, got 5003.0"},
		{"port null", "bad-port-null.json", "iopub_port", "want an integer 1..65535, got null"},
		{"port duplicate", "bad-port-duplicate.json", "control_port", `5001 already used by "shell_port"`},
		{"missing key", "bad-missing-key.json", "key", "missing"},
		{"key not string", "bad-key-not-string.json", "key", "want a string"},
		{"bad scheme", "bad-scheme.json", "signature_scheme", `unsupported "hmac-foo" ` + schemes},
		{"empty scheme", "bad-scheme-empty.json", "signature_scheme", `unsupported "" ` + schemes},
		{"bad transport", "bad-transport.json", "transport", `unsupported "udp" (want tcp or ipc)`},
		{"missing ip", "bad-missing-ip.json", "ip", "missing"},
		{"empty ip", "bad-empty-ip.json", "ip", "empty"},
		{"ip not string", "bad-ip-not-string.json", "ip", "want a string, got 127"},
		{"kernel_name object", "bad-kernel-name.json", "kernel_name", `want a string, got {"name":"python3","very":"long value tha…`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join("testdata", "conn", tt.file)
			_, err := Load(path)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Load(%s) = %v, want *ConfigError", path, err)
			}
			want := "connection file " + path + ": " + tt.want
			if tt.field != "" {
				want = fmt.Sprintf("connection file %s: field %q: %s", path, tt.field, tt.want)
			}
			if got := err.Error(); got != want {
				t.Errorf("error:\n got %s\nwant %s", got, want)
			}
			if ce.Path != path || ce.Field != tt.field {
				t.Errorf("Path, Field = %q, %q; want %q, %q", ce.Path, ce.Field, path, tt.field)
			}
			if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), testKey) {
				t.Errorf("error is not one key-free line: %q", err)
			}
		})
	}
}

func TestLoadUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kernel-x.json")
	_, err := Load(path)
	want := "connection file " + path + ": cannot read: no such file or directory"
	if err == nil || err.Error() != want {
		t.Fatalf("Load = %v, want %s", err, want)
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("want a *ConfigError wrapping fs.ErrNotExist, got %#v", err)
	}
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name, file string
		want       ConnInfo
		endpoints  [5]string
	}{
		{
			name: "tcp with extras", file: "valid-tcp.json",
			want: ConnInfo{Transport: "tcp", IP: "127.0.0.1", Ports: [5]int{5001, 5002, 5003, 5004, 5005},
				Key: testKey, SignatureScheme: "hmac-sha256", KernelName: "python3",
				Extra: map[string]json.RawMessage{
					"jupyter_session": json.RawMessage(`"/home/u/Untitled.ipynb"`),
					"nested_extra":    json.RawMessage(`{"a": [1, 2.5, "x"], "b": null}`)}},
			endpoints: [5]string{"tcp://127.0.0.1:5001", "tcp://127.0.0.1:5002", "tcp://127.0.0.1:5003",
				"tcp://127.0.0.1:5004", "tcp://127.0.0.1:5005"},
		},
		{
			name: "ipc", file: "valid-ipc.json",
			want: ConnInfo{Transport: "ipc", IP: "/run/user/1000/jupyter/kernel-ipc", Ports: [5]int{1, 2, 3, 4, 5},
				Key: testKey, SignatureScheme: "hmac-sha512", KernelName: "tf"},
			endpoints: [5]string{"ipc:///run/user/1000/jupyter/kernel-ipc-1", "ipc:///run/user/1000/jupyter/kernel-ipc-2",
				"ipc:///run/user/1000/jupyter/kernel-ipc-3", "ipc:///run/user/1000/jupyter/kernel-ipc-4",
				"ipc:///run/user/1000/jupyter/kernel-ipc-5"},
		},
		{
			name: "defaults, empty key", file: "valid-minimal.json",
			want: ConnInfo{Transport: "tcp", IP: "0.0.0.0", Ports: [5]int{5001, 5002, 5003, 5004, 5005},
				SignatureScheme: "hmac-sha256"},
			endpoints: [5]string{"tcp://0.0.0.0:5001", "tcp://0.0.0.0:5002", "tcp://0.0.0.0:5003",
				"tcp://0.0.0.0:5004", "tcp://0.0.0.0:5005"},
		},
		{
			name: "ipv6 is bracketed", file: "valid-ipv6.json",
			want: ConnInfo{Transport: "tcp", IP: "::1", Ports: [5]int{5001, 5002, 5003, 5004, 5005},
				Key: testKey, SignatureScheme: "hmac-md5"},
			endpoints: [5]string{"tcp://[::1]:5001", "tcp://[::1]:5002", "tcp://[::1]:5003",
				"tcp://[::1]:5004", "tcp://[::1]:5005"},
		},
		{
			name: "written by jupyter_client", file: "jupyter-ipc.json",
			want: ConnInfo{Transport: "ipc", IP: "/tmp/tfgpu-kernel-test/kernel-ipc", Ports: [5]int{1, 2, 3, 4, 5},
				Key: "5f2b1c6e-0d6a-4c1b-9d6e-2a7f3c4b5e6d", SignatureScheme: "hmac-sha256", KernelName: "python3"},
			endpoints: [5]string{"ipc:///tmp/tfgpu-kernel-test/kernel-ipc-1", "ipc:///tmp/tfgpu-kernel-test/kernel-ipc-2",
				"ipc:///tmp/tfgpu-kernel-test/kernel-ipc-3", "ipc:///tmp/tfgpu-kernel-test/kernel-ipc-4",
				"ipc:///tmp/tfgpu-kernel-test/kernel-ipc-5"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(filepath.Join("testdata", "conn", tt.file))
			testutil.NoErr(t, err)
			if !reflect.DeepEqual(*c, tt.want) {
				t.Errorf("got  %#v\nwant %#v", fields(*c), fields(tt.want))
			}
			for _, ch := range Channels {
				if got := c.Endpoint(ch); got != tt.endpoints[ch] {
					t.Errorf("Endpoint(%s) = %s, want %s", ch, got, tt.endpoints[ch])
				}
			}
		})
	}
}

// fields shows every field, key included, for a failing test's diff only.
func fields(c ConnInfo) string {
	type plain ConnInfo // drops the redacting methods
	return fmt.Sprintf("%+v", plain(c))
}

// TestMarshalMatchesJupyter: Marshal of a file jupyter_client wrote reproduces it byte
// for byte (names, order, indent).
func TestMarshalMatchesJupyter(t *testing.T) {
	for _, file := range []string{"jupyter-tcp.json", "jupyter-ipc.json"} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join("testdata", "conn", file)
			want, err := os.ReadFile(path)
			testutil.NoErr(t, err)
			c, err := Parse(path, want)
			testutil.NoErr(t, err)
			got, err := c.Marshal()
			testutil.NoErr(t, err)
			if !bytes.Equal(got, want) {
				t.Errorf("Marshal:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	tests := []struct{ name, file string }{
		{"tcp with extras", "valid-tcp.json"},
		{"ipc", "valid-ipc.json"},
		{"defaults", "valid-minimal.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(filepath.Join("testdata", "conn", tt.file))
			testutil.NoErr(t, err)
			data, err := c.Marshal()
			testutil.NoErr(t, err)
			c2, err := Parse("marshalled", data)
			if err != nil {
				t.Fatalf("Parse(Marshal()) = %v\n%s", err, data)
			}
			c.KernelName, c2.KernelName = "", "" // written as "" when absent, like jupyter_client
			if len(c.Extra) != len(c2.Extra) {
				t.Fatalf("Extra: got %d fields, want %d", len(c2.Extra), len(c.Extra))
			}
			for k, v := range c.Extra {
				if !jsonEqual(t, v, c2.Extra[k]) {
					t.Errorf("Extra[%q] = %s, want %s", k, c2.Extra[k], v)
				}
			}
			c.Extra, c2.Extra = nil, nil
			if !reflect.DeepEqual(c, c2) {
				t.Errorf("round trip:\n got %s\nwant %s", fields(*c2), fields(*c))
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	testutil.NoErr(t, json.Unmarshal(a, &x))
	if err := json.Unmarshal(b, &y); err != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func TestMarshalRejects(t *testing.T) {
	good := ConnInfo{Transport: "tcp", IP: "127.0.0.1", Ports: [5]int{1, 2, 3, 4, 5}, Key: testKey,
		SignatureScheme: "hmac-sha256"}
	tests := []struct {
		name   string
		change func(*ConnInfo)
		want   string
	}{
		{"port zero", func(c *ConnInfo) { c.Ports[HB] = 0 }, `connection info: field "hb_port": want an integer 1..65535, got 0`},
		{"no scheme", func(c *ConnInfo) { c.SignatureScheme = "" }, `connection info: field "signature_scheme": unsupported ""`},
		{"extra shadows key", func(c *ConnInfo) { c.Extra = map[string]json.RawMessage{"key": json.RawMessage(`"x"`)} },
			`encode connection info: Extra field "key" shadows a known field`},
		{"extra not JSON", func(c *ConnInfo) { c.Extra = map[string]json.RawMessage{"x": json.RawMessage(`{`)} },
			`encode connection info field "x": unexpected end of JSON input`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.change(&c)
			_, err := c.Marshal()
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Marshal = %v, want %s…", err, tt.want)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kernel-inner.json")
	// A world-readable file already there must end up 0600, not keep its mode.
	testutil.NoErr(t, os.WriteFile(path, []byte("old"), 0o644))
	c, err := Load(filepath.Join("testdata", "conn", "valid-tcp.json"))
	testutil.NoErr(t, err)
	testutil.NoErr(t, WriteFile(path, c))
	fi, err := os.Stat(path)
	testutil.NoErr(t, err)
	if fi.Mode() != 0o600 {
		t.Errorf("mode = %v, want -rw-------", fi.Mode())
	}
	c2, err := Load(path)
	testutil.NoErr(t, err)
	if c2.Key != c.Key || c2.Ports != c.Ports || len(c2.Extra) != 2 {
		t.Errorf("read back %v, want %v", c2, c)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}

	// Failure leaves nothing behind and names the file.
	bad := filepath.Join(dir, "missing-dir", "kernel-x.json")
	if err := WriteFile(bad, c); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("WriteFile into a missing directory = %v", err)
	}
	c.Ports[Shell] = 0
	if err := WriteFile(path, c); err == nil {
		t.Error("WriteFile of an invalid ConnInfo succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("failed writes left files: %v", entries)
	}
}

// TestWriteFileJupyterLoads: jupyter_client reads what WriteFile writes.
func TestWriteFileJupyterLoads(t *testing.T) {
	requireJupyter(t)
	c, err := Load(filepath.Join("testdata", "conn", "valid-tcp.json"))
	testutil.NoErr(t, err)
	path := filepath.Join(t.TempDir(), "kernel-1.json")
	testutil.NoErr(t, WriteFile(path, c))
	out := runPython(t, nil, `
import json, sys
from jupyter_client.connect import ConnectionFileMixin
m = ConnectionFileMixin()
m.load_connection_file(sys.argv[1])
info = m.get_connection_info()
info["key"] = info["key"].decode()
print(json.dumps(info, sort_keys=True))
`, path)
	want := `{"control_port": 5004, "hb_port": 5005, "iopub_port": 5002, "ip": "127.0.0.1", ` +
		`"key": "` + testKey + `", "shell_port": 5001, "signature_scheme": "hmac-sha256", "stdin_port": 5003, "transport": "tcp"}`
	if strings.TrimSpace(out) != want {
		t.Errorf("jupyter_client read:\n%s\nwant:\n%s", out, want)
	}
}

func TestKernelID(t *testing.T) {
	abs, _ := filepath.Abs("conn.json")
	tests := []struct{ name, path, want string }{
		{"jupyter uuid", "/run/user/1000/jupyter/runtime/kernel-2f1c5e0a-8d3b-4f4e-9a7c-1b2d3e4f5a6b.json",
			"2f1c5e0a-8d3b-4f4e-9a7c-1b2d3e4f5a6b"},
		{"relative kernel file", "kernel-abc.json", "abc"},
		{"other name hashes the absolute path", "/tmp/conn.json", "1b3371bda54a"},
		{"relative path hashes its absolute form", "conn.json", KernelID(abs)},
		{"empty id", "/tmp/kernel-.json", KernelID("/tmp/kernel-.json")},
		{"unsafe id", "/tmp/kernel-a b.json", KernelID("/tmp/kernel-a b.json")},
		{"dot id", "/tmp/kernel-...json", KernelID("/tmp/kernel-...json")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := KernelID(tt.path)
			if got != tt.want {
				t.Errorf("KernelID(%q) = %q, want %q", tt.path, got, tt.want)
			}
			if strings.HasPrefix(tt.name, "empty") || strings.HasPrefix(tt.name, "unsafe") || strings.HasPrefix(tt.name, "dot") {
				if len(got) != 12 || strings.Trim(got, "0123456789abcdef") != "" {
					t.Errorf("KernelID(%q) = %q, want 12 hex digits", tt.path, got)
				}
			}
		})
	}
}

func TestChannelString(t *testing.T) {
	var got []string
	for _, ch := range append(Channels, Channel(5), Channel(-1)) {
		got = append(got, ch.String())
	}
	want := "shell iopub stdin control hb Channel(5) Channel(-1)"
	if strings.Join(got, " ") != want {
		t.Errorf("got %v, want %s", got, want)
	}
}

// TestKeyNeverPrinted: every way the package can render a ConnInfo, a Signer or an
// error leaves the key out.
func TestKeyNeverPrinted(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "conn", "valid-tcp.json"))
	testutil.NoErr(t, err)
	s, err := NewSigner(c.SignatureScheme, c.Key)
	testutil.NoErr(t, err)
	s.Sign(nil, nil, nil, nil) // fill the pool, so printing walks a live HMAC state
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("start", "conn", c, "connv", *c, "signer", s)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("start", "conn", c, "signer", *s)
	_, keyErr := Load(filepath.Join("testdata", "conn", "bad-key-not-string.json"))
	_, schemeErr := NewSigner("hmac-nope", testKey)
	outputs := map[string]string{
		"String":        c.String(),
		"%v":            fmt.Sprintf("%v", c),
		"%+v":           fmt.Sprintf("%+v", *c),
		"%#v":           fmt.Sprintf("%#v", *c),
		"%#v pointer":   fmt.Sprintf("%#v", c),
		"nested":        fmt.Sprintf("%+v", struct{ C ConnInfo }{*c}),
		"slog":          logs.String(),
		"signer %v":     fmt.Sprintf("%v", s),
		"signer %+v":    fmt.Sprintf("%+v", *s),
		"signer %#v":    fmt.Sprintf("%#v", s),
		"key error":     keyErr.Error(),
		"scheme error":  schemeErr.Error(),
		"marshal error": errString(func() error { d := *c; d.Ports[0] = 0; _, err := d.Marshal(); return err }()),
	}
	for name, out := range outputs {
		if strings.Contains(out, testKey) || strings.Contains(out, "s3cr3t") {
			t.Errorf("%s shows the key: %s", name, out)
		}
		if !strings.Contains(out, "redacted") && strings.Contains(name, "%") {
			t.Errorf("%s does not say the key is redacted: %s", name, out)
		}
	}
	t.Logf("String: %s", c)
	t.Logf("slog: %s", logs.String())
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
