package jmsg

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// capture is one message serialized by jupyter_client (testdata/gen.py).
type capture struct {
	Name    string
	Scheme  string   `json:"scheme"`
	Key     string   `json:"key"`
	MsgType string   `json:"msg_type"`
	Idents  int      `json:"idents"`
	Frames  []string `json:"frames"` // base64
	frames  [][]byte
}

func loadCaptures(tb testing.TB) []capture {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "wire", "*.json"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no captures in testdata/wire: %v", err)
	}
	var caps []capture
	for _, p := range paths {
		data, err := os.ReadFile(p)
		testutil.NoErr(tb, err)
		c := capture{Name: strings.TrimSuffix(filepath.Base(p), ".json")}
		if err := json.Unmarshal(data, &c); err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		for _, f := range c.Frames {
			b, err := base64.StdEncoding.DecodeString(f)
			if err != nil {
				tb.Fatalf("%s: %v", p, err)
			}
			c.frames = append(c.frames, b)
		}
		caps = append(caps, c)
	}
	return caps
}

// TestCaptured checks Split, Verify, Sign, MsgType and Header against real frames.
func TestCaptured(t *testing.T) {
	for _, c := range loadCaptures(t) {
		t.Run(c.Name, func(t *testing.T) {
			p, err := Split(c.frames)
			testutil.NoErr(t, err)
			if len(p.Idents) != c.Idents || len(p.Buffers) != len(c.frames)-c.Idents-6 {
				t.Errorf("Split: %d idents, %d buffers; want %d, %d", len(p.Idents), len(p.Buffers),
					c.Idents, len(c.frames)-c.Idents-6)
			}
			s, err := NewSigner(c.Scheme, c.Key)
			testutil.NoErr(t, err)
			if !s.Verify(p) {
				t.Error("Verify rejects a message jupyter_client signed")
			}
			if got := s.Sign(p.Header, p.Parent, p.Metadata, p.Content); !bytes.Equal(got, p.Signature) {
				t.Errorf("Sign = %s, want %s", got, p.Signature)
			}
			if mt, err := MsgType(p.Header); err != nil || mt != c.MsgType {
				t.Errorf("MsgType = %q, %v; want %q", mt, err, c.MsgType)
			}
			h, err := Header(p.Header)
			if err != nil || h.MsgType != c.MsgType || h.Username != "alice" || h.Version != "5.3" ||
				h.MsgID == "" || h.Session == "" || h.Date == "" {
				t.Errorf("Header = %+v, %v", h, err)
			}

			// A one-byte change in any signed frame must fail (unless there is no key);
			// buffers are not signed, so changing one must not.
			signed := map[string]int{"signature": 0, "header": 1, "parent": 2, "metadata": 3, "content": 4}
			for part, off := range signed {
				tampered := tamper(c.frames, c.Idents+1+off)
				tp, _ := Split(tampered)
				if got := s.Verify(tp); got != (c.Key == "") {
					t.Errorf("Verify after changing %s = %v", part, got)
				}
			}
			if len(p.Buffers) > 0 {
				tp, _ := Split(tamper(c.frames, c.Idents+6))
				if !s.Verify(tp) {
					t.Error("Verify fails after changing a buffer, which is not signed")
				}
			}
		})
	}
}

// tamper copies frames and flips one byte of frames[i] (or adds one if it is empty).
func tamper(frames [][]byte, i int) [][]byte {
	out := make([][]byte, len(frames))
	copy(out, frames)
	f := append([]byte(nil), frames[i]...)
	if len(f) == 0 {
		f = []byte{'x'}
	} else {
		f[len(f)/2] ^= 0x01
	}
	out[i] = f
	return out
}

// TestSignVectors: HMACs computed independently with Python's hmac module.
func TestSignVectors(t *testing.T) {
	key := "k3y-\u00e9" // non-ASCII: Jupyter keys are the UTF-8 bytes of the string
	parts := [4][]byte{[]byte(`{"msg_type":"shutdown_request"}`), []byte(`{}`), []byte(`{}`), []byte(`{"restart":true}`)}
	tests := []struct{ name, scheme, want string }{
		{"sha256", "hmac-sha256", "0c6188a4d693899edf56129f135f3c22525086a0df781252df570327342a05ef"},
		{"sha1", "hmac-sha1", "6bde04531f27ab10916b788cf61561e18fa2d241"},
		{"md5", "hmac-md5", "6bd75c25a4df1e244c164d019fab03a8"},
		{"sha512", "hmac-sha512", "4acbb43661e106fc6fffce41853d8351aeacaea0d477d3623a29ea6bf9c5fa06daf363ca91a57ca4810b9133fd11c5509995056f748a574ef3d41fd30509d8ed"},
		{"sha384", "hmac-sha384", "e59ba2eb02226436c8fc4d89e38c635fe1d44c55d1d4a55d071ce2e75058bb870710e2032c39d6d69c9639376138597d"},
		{"sha224", "hmac-sha224", "b97809cce2abd0d220531251835ed840ff5cd10051a8654faf61e8bc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSigner(tt.scheme, key)
			testutil.NoErr(t, err)
			if s.Scheme() != tt.scheme {
				t.Errorf("Scheme() = %s", s.Scheme())
			}
			for i := 0; i < 3; i++ { // again and again: pooled states must reset
				if got := string(s.Sign(parts[0], parts[1], parts[2], parts[3])); got != tt.want {
					t.Fatalf("Sign #%d = %s, want %s", i, got, tt.want)
				}
			}
			p := Parts{Signature: []byte(tt.want), Header: parts[0], Parent: parts[1], Metadata: parts[2], Content: parts[3]}
			if !s.Verify(p) {
				t.Error("Verify rejects the right signature")
			}
			p.Signature = []byte(strings.ToUpper(tt.want)) // jupyter_client compares the hex text
			if s.Verify(p) {
				t.Error("Verify accepts upper-case hex")
			}
			p.Signature = p.Signature[:0]
			if s.Verify(p) {
				t.Error("Verify accepts an empty signature")
			}
		})
	}
}

func TestSignerEmptyKey(t *testing.T) {
	s, err := NewSigner("hmac-sha256", "")
	testutil.NoErr(t, err)
	if sig := s.Sign([]byte("{}"), nil, nil, nil); sig == nil || len(sig) != 0 {
		t.Errorf("Sign with empty key = %q, want empty", sig)
	}
	if !s.Verify(Parts{Signature: []byte("garbage")}) {
		t.Error("with an empty key every message verifies (Jupyter semantics)")
	}
	if _, err := NewSigner("sha256", "k"); !errors.Is(err, ErrUnknownScheme) {
		t.Errorf("NewSigner(sha256) = %v, want ErrUnknownScheme", err)
	}
}

func TestSignerConcurrent(t *testing.T) {
	s, _ := NewSigner("hmac-sha256", testKey)
	mac := hmac.New(sha256.New, []byte(testKey))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		msg := []byte{byte(g)}
		mac.Reset()
		mac.Write(msg)
		want := hex.EncodeToString(mac.Sum(nil))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if got := string(s.Sign(msg, nil, nil, nil)); got != want {
					t.Errorf("concurrent Sign = %s, want %s", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestSplit(t *testing.T) {
	d := Delimiter
	f := func(s ...string) [][]byte {
		var out [][]byte
		for _, x := range s {
			if x == "D" {
				out = append(out, d)
			} else {
				out = append(out, []byte(x))
			}
		}
		return out
	}
	tests := []struct {
		name            string
		frames          [][]byte
		err             error
		idents, buffers int
		sig             string
	}{
		{"no idents", f("D", "s", "h", "p", "m", "c"), nil, 0, 0, "s"},
		{"two idents and buffers", f("a", "b", "D", "s", "h", "p", "m", "c", "b1", ""), nil, 2, 2, "s"},
		{"empty frames are frames", f("", "D", "", "", "", "", ""), nil, 1, 0, ""},
		{"first delimiter wins", f("a", "D", "D", "h", "p", "m", "c"), nil, 1, 0, "<IDS|MSG>"},
		{"no delimiter", f("a", "s", "h", "p", "m", "c"), ErrNoDelimiter, 0, 0, ""},
		{"nothing", nil, ErrNoDelimiter, 0, 0, ""},
		{"four after delimiter", f("a", "D", "s", "h", "p", "m"), ErrShortMessage, 0, 0, ""},
		{"delimiter last", f("a", "D"), ErrShortMessage, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Split(tt.frames)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Split err = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if len(p.Idents) != tt.idents || len(p.Buffers) != tt.buffers || string(p.Signature) != tt.sig {
				t.Errorf("Split = %d idents, %d buffers, sig %q", len(p.Idents), len(p.Buffers), p.Signature)
			}
			// No copies: the parts are the caller's frames.
			if sf := tt.frames[tt.idents+1]; len(sf) > 0 && &p.Signature[0] != &sf[0] {
				t.Error("Signature was copied")
			}
			// Appending an identity must not overwrite the delimiter.
			_ = append(p.Idents, []byte("new"))
			if !bytes.Equal(tt.frames[tt.idents], Delimiter) {
				t.Error("append to Idents clobbered the delimiter")
			}
		})
	}
}

func TestSplitAliases(t *testing.T) {
	frames := [][]byte{[]byte("id"), []byte(delim), []byte("sig"), []byte("hdr"), []byte("p"), []byte("m"), []byte("c")}
	p, err := Split(frames)
	testutil.NoErr(t, err)
	frames[3][0] = 'H'
	frames[0][0] = 'I'
	if string(p.Header) != "Hdr" || string(p.Idents[0]) != "Id" {
		t.Errorf("Split copied: header %q ident %q", p.Header, p.Idents[0])
	}
}

func TestMsgType(t *testing.T) {
	tests := []struct {
		name, header, want string
		wantErr            bool
	}{
		{"ipykernel order", `{"msg_id": "1", "msg_type": "execute_request", "username": "u", "session": "s"}`, "execute_request", false},
		{"compact", `{"msg_type":"kernel_info_request"}`, "kernel_info_request", false},
		{"whitespace", " \n{ \"msg_type\" \t:\r\n \"a\" } \n", "a", false},
		{"last duplicate wins", `{"msg_type": "a", "x": 1, "msg_type": "b"}`, "b", false},
		{"nested decoy", `{"x": {"msg_type": "decoy", "y": ["}", "\"msg_type\": \"z\""]}, "msg_type": "real"}`, "real", false},
		{"decoy in a string", `{"username": "\"msg_type\": \"evil\", ", "msg_type": "ok"}`, "ok", false},
		{"escaped value", `{"msg_type": "exe\u0063ute_\"request\""}`, "execute_\"request\"", false},
		{"escaped key", `{"msg\u005ftype": "shutdown_request"}`, "shutdown_request", false},
		{"unicode value", `{"msg_type": "ünï"}`, "ünï", false},
		{"scalars and nulls", `{"a": null, "b": true, "c": -1.5e3, "d": [], "e": {}, "msg_type": "t"}`, "t", false},
		{"case matters", `{"MSG_TYPE": "shutdown_request"}`, "", true},
		{"missing", `{"msg_id": "1"}`, "", true},
		{"empty object", `{}`, "", true},
		{"not a string", `{"msg_type": 5}`, "", true},
		{"null value", `{"msg_type": null}`, "", true},
		{"later non-string wins", `{"msg_type": "a", "msg_type": 1}`, "", true},
		{"array", `["msg_type"]`, "", true},
		{"null", `null`, "", true},
		{"empty", ``, "", true},
		{"truncated", `{"msg_type": "a"`, "", true},
		{"truncated after colon", `{"":`, "", true},
		{"truncated in nested value", `{"a": {"b": [1, "x`, "", true},
		{"trailing garbage", `{"msg_type": "a"} x`, "", true},
		{"raw control char", "{\"msg_type\": \"a\x01\"}", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MsgType([]byte(tt.header))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("MsgType = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrBadHeader) {
				t.Errorf("error %v is not ErrBadHeader", err)
			}
			h, herr := Header([]byte(tt.header))
			if (herr != nil) != tt.wantErr || h.MsgType != tt.want {
				t.Errorf("Header = %+v, %v", h, herr)
			}
		})
	}
}

func TestHeaderFieldTypes(t *testing.T) {
	if _, err := Header([]byte(`{"msg_type": "a", "date": 5}`)); !errors.Is(err, ErrBadHeader) {
		t.Errorf("Header with a numeric date = %v, want ErrBadHeader", err)
	}
	h, err := Header([]byte(`{"msg_type": "a"}`))
	if err != nil || h != (MsgHeader{MsgType: "a"}) {
		t.Errorf("Header of an old-style header = %+v, %v", h, err)
	}
}

func TestNewMessage(t *testing.T) {
	s, _ := NewSigner("hmac-sha256", testKey)
	parent := []byte(`{"msg_id": "p1", "msg_type": "shutdown_request"}`)
	frames, err := NewMessage(s, [][]byte{[]byte("client")}, "shutdown_reply", parent, "sess-1",
		map[string]any{"status": "ok", "restart": false})
	testutil.NoErr(t, err)
	p, err := Split(frames)
	testutil.NoErr(t, err)
	if !s.Verify(p) {
		t.Error("own message does not verify")
	}
	if string(p.Idents[0]) != "client" || !bytes.Equal(p.Parent, parent) || string(p.Metadata) != "{}" ||
		string(p.Content) != `{"restart":false,"status":"ok"}` {
		t.Errorf("frames = %q", frames)
	}
	h, err := Header(p.Header)
	testutil.NoErr(t, err)
	if h.MsgType != "shutdown_reply" || h.Session != "sess-1" || h.Username != "tfgpu-kernel" || h.Version != "5.3" {
		t.Errorf("header = %+v", h)
	}
	if len(h.MsgID) != 32 || strings.Trim(h.MsgID, "0123456789abcdef") != "" || h.MsgID[12] != '4' {
		t.Errorf("msg_id %q is not UUID4 hex", h.MsgID)
	}
	d, err := time.Parse(time.RFC3339Nano, h.Date)
	if err != nil || time.Since(d) > time.Minute || !strings.HasSuffix(h.Date, "Z") || len(h.Date) != len("2006-01-02T15:04:05.000000Z") {
		t.Errorf("date %q: %v", h.Date, err)
	}
	again, _ := NewMessage(s, nil, "status", nil, "sess-1", nil)
	if p2, _ := Split(again); string(p2.Parent) != "{}" || string(p2.Content) != "{}" || p2.Header == nil {
		t.Errorf("defaults: %q", again)
	} else if h2, _ := Header(p2.Header); h2.MsgID == h.MsgID {
		t.Error("msg_id reused")
	}
}

func TestNewMessageErrors(t *testing.T) {
	s, _ := NewSigner("hmac-sha256", testKey)
	tests := []struct {
		name    string
		signer  *Signer
		msgType string
		parent  string
		content any
	}{
		{"nil signer", nil, "status", "", nil},
		{"no msg_type", s, "", "", nil},
		{"parent not JSON", s, "status", "{", nil},
		{"parent not an object", s, "status", `"x"`, nil},
		{"content not encodable", s, "status", "", map[string]any{"f": func() {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewMessage(tt.signer, nil, tt.msgType, []byte(tt.parent), "s", tt.content); err == nil {
				t.Error("NewMessage succeeded")
			}
		})
	}
}

// TestNewMessageJupyterAccepts: jupyter_client's Session.deserialize (which checks the
// signature) accepts what NewMessage builds, for every scheme and for an empty key.
func TestNewMessageJupyterAccepts(t *testing.T) {
	requireJupyter(t)
	caps := loadCaptures(t)
	var reqHeader []byte
	for _, c := range caps {
		if c.Name == "execute_request-sha256" {
			p, _ := Split(c.frames)
			reqHeader = p.Header
		}
	}
	tests := []struct{ name, scheme, key string }{
		{"sha256", "hmac-sha256", testKey},
		{"sha512 non-ASCII key", "hmac-sha512", "ключ-🔑"},
		{"md5", "hmac-md5", testKey},
		{"empty key", "hmac-sha256", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSigner(tt.scheme, tt.key)
			testutil.NoErr(t, err)
			frames, err := NewMessage(s, [][]byte{[]byte("id\x00")}, "execute_reply", reqHeader, "sess",
				map[string]any{"status": "error", "ename": "KernelDied", "evalue": "GPU ✓ released"})
			testutil.NoErr(t, err)
			in, _ := json.Marshal(map[string]any{"scheme": tt.scheme, "key": tt.key, "frames": frames}) // []byte → base64
			out := runPython(t, in, `
import base64, json, sys
from jupyter_client.session import Session
req = json.load(sys.stdin)
frames = [base64.b64decode(f) for f in req["frames"]]
s = Session(key=req["key"].encode(), signature_scheme=req["scheme"])
idents, msg = s.feed_identities(frames, copy=True)
m = s.deserialize(msg, content=True, copy=True)
print(json.dumps({"idents": [i.decode() for i in idents], "msg_type": m["msg_type"],
    "username": m["header"]["username"], "version": m["header"]["version"],
    "date_year": m["header"]["date"].year, "parent_type": m["parent_header"].get("msg_type"),
    "content": m["content"]}, sort_keys=True, ensure_ascii=False))
`)
			want := `{"content": {"ename": "KernelDied", "evalue": "GPU ✓ released", "status": "error"}, ` +
				`"date_year": ` + time.Now().UTC().Format("2006") + `, "idents": ["id\u0000"], "msg_type": "execute_reply", ` +
				`"parent_type": "execute_request", "username": "tfgpu-kernel", "version": "5.3"}`
			if strings.TrimSpace(out) != want {
				t.Errorf("jupyter_client decoded:\n%s\nwant:\n%s", out, want)
			}
		})
	}
}

var jupyterOnce struct {
	sync.Once
	err error
}

// requireJupyter skips a test when /usr/bin/python3 cannot import jupyter_client,
// except in CI, where nothing that matters may be skipped.
func requireJupyter(t *testing.T) {
	t.Helper()
	testutil.Integration(t)
	jupyterOnce.Do(func() {
		out, err := exec.Command("/usr/bin/python3", "-c", "import jupyter_client").CombinedOutput()
		if err != nil {
			jupyterOnce.err = errors.New(strings.TrimSpace(string(out)) + ": " + err.Error())
		}
	})
	if err := jupyterOnce.err; err != nil {
		testutil.RequireOrSkip(t, "needs /usr/bin/python3 with jupyter_client (python3-jupyter-client): %v", err)
	}
}

func runPython(t *testing.T, stdin []byte, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", script}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	return string(out)
}
