package kernelspec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// TestWrapGolden renders the wrapper of each kernelspec in testdata/wrap-src
// and compares it with testdata/wrap-NAME.kernel.json (go test -update rewrites).
func TestWrapGolden(t *testing.T) {
	tests := []struct {
		name   string // wrap-src/NAME.kernel.json → wrap-NAME.kernel.json
		opts   Options
		python string // the Python that found it (Foreign.Python)
	}{
		{name: "condaenv", opts: Options{ // their env over DefaultEnv, --env over theirs, run flags
			Binary: "/usr/local/bin/tfgpu-kernel", Version: "v0.3.0",
			Env:      map[string]string{"CUDA_VISIBLE_DEVICES": "0", "FOO": "baz"},
			RunFlags: []string{"--memory-limit", "16G", "--log-level", "debug"},
		}},
		{name: "ir", opts: Options{ // interrupt_mode, debugger false, other metadata kept
			Binary: "/usr/local/bin/tfgpu-kernel", Version: "v0.3.0", DisplayName: "R on the GPU",
		}},
		{name: "minimal", opts: Options{ // no display name, interrupt_mode, env or metadata
			Binary: "/b/tfgpu-kernel",
		}},
		{name: "ipykernel7", opts: Options{ // ipykernel 7.4's own: supported_encryption is the supervisor's, not theirs;
			Binary: "/b/tfgpu-kernel", // argv[0] "python" is the venv's that found it, as jupyter_client would run it
		}, python: "/opt/venv/bin/python3.12"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := readFile(t, filepath.Join("testdata", "wrap-src", tc.name+".kernel.json"))
			f, err := parseSpec(tc.name, "/opt/kernels/"+tc.name, src)
			testutil.NoErr(t, err)
			f.Python = tc.python
			got, err := WrapJSON(tc.opts, f)
			testutil.NoErr(t, err)
			path := filepath.Join("testdata", "wrap-"+tc.name+".kernel.json")
			if *update {
				testutil.NoErr(t, os.WriteFile(path, got, 0o644))
			}
			if want := readFile(t, path); !bytes.Equal(got, want) {
				t.Errorf("kernel.json differs from %s (go test -update to rewrite):\n%s", path, got)
			}
			if !isOurs(got) {
				t.Errorf("wrapper not marked as ours")
			}
			// Their argv, unchanged after "--" but for a bare "python"
			// (jupyter_client's rule, see Foreign.Python).
			var in, out struct{ Argv []string }
			_ = json.Unmarshal(src, &in)
			_ = json.Unmarshal(got, &out)
			if tc.python != "" {
				in.Argv[0] = tc.python
			}
			if tail := out.Argv[len(out.Argv)-len(in.Argv):]; !slices.Equal(tail, in.Argv) || out.Argv[len(out.Argv)-len(in.Argv)-1] != "--" {
				t.Errorf("argv = %q, want … -- %q", out.Argv, in.Argv)
			}
		})
	}
}

func TestWrapRefuses(t *testing.T) {
	ours, err := KernelJSON(Options{Binary: "/b/tfgpu-kernel"}, testPython)
	testutil.NoErr(t, err)
	tests := []struct {
		name, json, msg string
	}{
		{"already ours", string(ours), "already runs under tfgpu-kernel"},
		{"connection file inside an argument", `{"argv":["k","--f={connection_file}"]}`, `no "{connection_file}" argument`},
		{"no connection file", `{"argv":["k","-f","conn.json"]}`, `no "{connection_file}" argument`},
		{"empty argv", `{"argv":[],"display_name":"x"}`, "argv is empty"},
		{"not JSON", `{"argv":`, "kernel.json"},
		{"env not strings", `{"argv":["k","{connection_file}"],"env":{"A":1}}`, "kernel.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSpec("k", "/opt/k", []byte(tc.json))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v; want ErrInvalid saying %q in one line", err, tc.msg)
			}
		})
	}
}

func TestWrapName(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"name", "condaenv", "condaenv-tfgpu"},
		{"mixed case like jupyter lists it", "CondaEnv", "condaenv-tfgpu"},
		{"directory", "/opt/conda/share/jupyter/kernels/Py3/", "py3-tfgpu"},
		{"kernel.json", "./kernels/ir/kernel.json", "ir-tfgpu"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := WrapName(tc.in); got != tc.want {
				t.Errorf("WrapName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// writeForeign writes a kernelspec dir kernels/name with kernel.json and
// the given extra files, and returns the dir.
func writeForeign(t *testing.T, kernels, name, kernelJSON string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(kernels, name)
	testutil.NoErr(t, os.MkdirAll(dir, 0o755))
	files["kernel.json"] = kernelJSON
	for n, b := range files {
		testutil.NoErr(t, os.WriteFile(filepath.Join(dir, n), []byte(b), 0o644))
	}
	return dir
}

// treeSum is a digest of every file name, mode and content under dir.
func treeSum(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %d\n", p, fi.Mode(), fi.ModTime().UnixNano())
		if d.Type().IsRegular() {
			h.Write(readFile(t, p))
		}
		return nil
	})
	testutil.NoErr(t, err)
	return fmt.Sprintf("%x", h.Sum(nil))
}

const condaJSON = `{"argv":["/usr/bin/python3","-m","ipykernel_launcher","-f","{connection_file}"],
 "display_name":"Conda","language":"python","env":{"FOO":"bar"}}`

// TestWrapInstallDirectory wraps a kernelspec given as a directory (no
// Python asked), with and without logos of its own, and uninstalls the
// wrapper; the wrapped directory is never changed.
func TestWrapInstallDirectory(t *testing.T) {
	src := filepath.Join(t.TempDir(), "kernels")
	withLogos := writeForeign(t, src, "withlogos", condaJSON,
		map[string]string{"logo-64x64.png": "their logo", "logo-svg.svg": "<svg/>", "kernel.js": "// js", "README": "not copied"})
	plain := writeForeign(t, src, "plain", condaJSON, map[string]string{})
	before := treeSum(t, src)
	prefix := t.TempDir()
	kernels := filepath.Join(prefix, "share/jupyter/kernels")

	tests := []struct {
		name, wrap, wantName string
		wantFiles            []string
		theirLogo            bool
	}{
		{"their logos and kernel.js", withLogos, "withlogos-tfgpu",
			[]string{"kernel.js", "kernel.json", "logo-64x64.png", "logo-svg.svg"}, true},
		{"our logos", plain + "/kernel.json", "plain-tfgpu",
			[]string{"kernel.json", "logo-32x32.png", "logo-64x64.png"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Binary: "/b/tfgpu-kernel", Wrap: tc.wrap, Dest: Prefix, Prefix: prefix}
			res, err := Install(o)
			testutil.NoErr(t, err)
			if want := filepath.Join(kernels, tc.wantName); res.Dir != want || res.Wrapped == nil || res.DisplayName != "Conda (clean restart)" {
				t.Fatalf("Install = %+v; want dir %s wrapping, display name %q", res, want, "Conda (clean restart)")
			}
			if got := testutil.DirNames(t, res.Dir); !slices.Equal(got, tc.wantFiles) {
				t.Errorf("files = %q, want %q", got, tc.wantFiles)
			}
			logo := readFile(t, filepath.Join(res.Dir, "logo-64x64.png"))
			if tc.theirLogo != (string(logo) == "their logo") {
				t.Errorf("logo-64x64.png = %.20q; want theirs: %v", logo, tc.theirLogo)
			}
			var s struct {
				Argv []string
				Env  map[string]string
			}
			if err := json.Unmarshal(readFile(t, filepath.Join(res.Dir, "kernel.json")), &s); err != nil ||
				s.Argv[0] != "/b/tfgpu-kernel" || s.Argv[len(s.Argv)-1] != "{connection_file}" || s.Env["FOO"] != "bar" {
				t.Errorf("kernel.json = %+v, %v", s, err)
			}
			// Uninstall by the wrapped spec: removes the wrapper only.
			dir, err := Uninstall(Options{Wrap: tc.wrap, Dest: Prefix, Prefix: prefix})
			if err != nil || dir != res.Dir {
				t.Fatalf("Uninstall = %q, %v", dir, err)
			}
			if _, err := os.Stat(res.Dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("wrapper still there: %v", err)
			}
		})
	}
	if after := treeSum(t, src); after != before {
		t.Errorf("the wrapped kernelspecs changed")
	}
}

// TestWrapKeepsTheirs checks the wrapper can neither be written over the
// wrapped spec nor take its name, even with Replace.
func TestWrapKeepsTheirs(t *testing.T) {
	prefix := t.TempDir()
	kernels := filepath.Join(prefix, "share/jupyter/kernels")
	theirs := writeForeign(t, kernels, "foo", condaJSON, map[string]string{})
	link := filepath.Join(t.TempDir(), "bar")
	testutil.NoErr(t, os.Symlink(theirs, link))
	before := treeSum(t, theirs)
	tests := []struct {
		name string
		o    Options
		msg  string
	}{
		{"same name", Options{Wrap: theirs, Name: "FOO"}, "name of the kernelspec being wrapped"},
		{"same directory through a link", Options{Wrap: link, Name: "foo"}, "it is the kernelspec being wrapped"},
		{"wrapper of a wrapper", Options{Wrap: theirs, Name: "foo-2"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Binary, tc.o.Dest, tc.o.Prefix, tc.o.Replace = "/b/tfgpu-kernel", Prefix, prefix, true
			res, err := Install(tc.o)
			if tc.msg == "" {
				testutil.NoErr(t, err)
				// Wrapping the wrapper is refused: one supervisor is enough.
				if _, err := Install(Options{Binary: "/b/tfgpu-kernel", Wrap: res.Dir, Dest: Prefix, Prefix: prefix}); !errors.Is(err, ErrInvalid) ||
					!strings.Contains(err.Error(), "already runs under tfgpu-kernel") {
					t.Errorf("wrapping a wrapper: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v; want ErrInvalid saying %q", err, tc.msg)
			}
		})
	}
	testutil.NoErr(t, os.RemoveAll(filepath.Join(kernels, "foo-2")))
	if treeSum(t, theirs) != before {
		t.Errorf("the wrapped kernelspec changed")
	}
}

// TestWrapFindSpec asks the real jupyter_client for kernelspecs by name and
// checks Jupyter's order: JUPYTER_PATH entries in order, then the user data
// dir; a name it does not know is a usage error listing the ones it does.
func TestWrapFindSpec(t *testing.T) {
	py := systemPython(t)
	home := isolate(t)
	t.Setenv("IPYTHONDIR", filepath.Join(home, "ipython"))
	jp1, jp2, data := filepath.Join(home, "jp1"), filepath.Join(home, "jp2"), filepath.Join(home, "data")
	t.Setenv("JUPYTER_PATH", jp1+string(os.PathListSeparator)+jp2)
	t.Setenv("JUPYTER_DATA_DIR", data)
	spec := func(display string) string {
		return `{"argv":["/usr/bin/python3","-m","ipykernel_launcher","-f","{connection_file}"],"display_name":"` + display + `","language":"python"}`
	}
	writeForeign(t, filepath.Join(jp2, "kernels"), "dup", spec("from jp2"), map[string]string{})
	writeForeign(t, filepath.Join(data, "kernels"), "dup", spec("from data"), map[string]string{})
	writeForeign(t, filepath.Join(data, "kernels"), "Mixed", spec("mixed"), map[string]string{})

	tests := []struct {
		name, find, wantDisplay, wantDir string
		setup                            func()
	}{
		{name: "JUPYTER_PATH before the data dir", find: "dup", wantDisplay: "from jp2", wantDir: filepath.Join(jp2, "kernels/dup")},
		{name: "first JUPYTER_PATH entry first", find: "dup", wantDisplay: "from jp1", wantDir: filepath.Join(jp1, "kernels/dup"),
			setup: func() { writeForeign(t, filepath.Join(jp1, "kernels"), "dup", spec("from jp1"), map[string]string{}) }},
		{name: "case-insensitive like jupyter_client", find: "MIXED", wantDisplay: "mixed", wantDir: filepath.Join(data, "kernels/Mixed")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			f, err := FindSpec(context.Background(), py, tc.find)
			if err != nil || f.DisplayName != tc.wantDisplay || f.Dir != tc.wantDir || f.Name != strings.ToLower(tc.find) {
				t.Errorf("FindSpec(%q) = %+v, %v; want %q from %s", tc.find, f, err, tc.wantDisplay, tc.wantDir)
			}
		})
	}
	// The list holds the test's own and, but under TestMain's Hermetic,
	// whatever the host has installed system-wide ("ir", say): sorted.
	_, err := FindSpec(context.Background(), py, "nosuch")
	var listed []string
	if err != nil {
		_, l, _ := strings.Cut(err.Error(), " finds: ")
		l, _, _ = strings.Cut(l, " (see ")
		listed = strings.Split(l, ", ")
	}
	if !errors.Is(err, ErrNoSuchKernel) || !errors.Is(err, ErrInvalid) ||
		!slices.Contains(listed, "dup") || !slices.Contains(listed, "mixed") || !slices.IsSorted(listed) {
		t.Errorf("FindSpec(nosuch) = %v; want ErrNoSuchKernel listing dup and mixed, sorted", err)
	}
	if _, err := FindSpec(context.Background(), py, "a b"); !errors.Is(err, ErrNoSuchKernel) {
		t.Errorf("FindSpec(\"a b\") = %v; want ErrNoSuchKernel", err)
	}
}

// TestWrapFindSpecAnswers covers what the Python may answer, with fakes.
func TestWrapFindSpecAnswers(t *testing.T) {
	dir := t.TempDir()
	native := `{"argv":["/x/python3","-m","ipykernel_launcher","-f","{connection_file}"],"env":{},"display_name":"Python 3 (ipykernel)","language":"python","interrupt_mode":"signal","metadata":{"debugger":true}}`
	tests := []struct {
		name, body string
		wantErr    error
		wantMsg    string
	}{
		{name: "built-in spec without kernel.json", body: `echo '{"dir":"` + dir + `","spec":` + native + `}'`},
		{name: "no jupyter_client", body: `echo '{"error":"cannot import jupyter_client: ModuleNotFoundError: No module named x"}'`,
			wantMsg: "cannot import jupyter_client"},
		{name: "crash", body: `echo 'Traceback' >&2; echo 'SyntaxError: boom' >&2; exit 1`, wantMsg: "SyntaxError: boom"},
		{name: "garbage", body: `echo hello`, wantMsg: "unexpected output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			py := Python{Executable: fakePython(t, t.TempDir(), "python3", tc.body)}
			f, err := FindSpec(context.Background(), py, "python3")
			if tc.wantMsg == "" {
				if err != nil || f.Dir != dir || f.Argv[0] != "/x/python3" || f.DisplayName != "Python 3 (ipykernel)" {
					t.Errorf("FindSpec = %+v, %v", f, err)
				}
				return
			}
			if err == nil || errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantMsg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v; want a one-line non-usage error saying %q", err, tc.wantMsg)
			}
		})
	}
}
