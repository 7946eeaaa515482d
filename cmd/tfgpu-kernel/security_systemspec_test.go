//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Issue 33, finding B: a kernelspec for every user (install --system
// --wrap) is root's whole: not only the wrapped kernel's program, but its
// kernel.json (argv, env), the directory it is in and every one above,
// and the logos, kernel.js and kernel.css copied from there, at install
// and at every upgrade. bob plants each; root's install refuses in one
// line naming the file and its owner, and writes nothing; the same spec,
// root's, installs.

// systemInstaller runs root's `tfgpu-kernel install --system` in a mount
// namespace of its own, where srv (root's, 0755) is /srv, with the binary
// in /srv/bin, and share is /usr/local/share: --system writes share, never
// the machine's /usr/local/share, and the binary's path is root's all the
// way up, as install --system requires.
type systemInstaller struct {
	t          *testing.T
	srv, share string
	env        []string
}

func newSystemInstaller(t *testing.T) *systemInstaller {
	t.Helper()
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "true").CombinedOutput(); err != nil {
		msg := "needs unshare --mount (root, CAP_SYS_ADMIN): " + strings.TrimSpace(string(out))
		testutil.RequireOrSkip(t, "%s", msg)
	}
	srv := sharedDir(t)
	bin := filepath.Join(srv, "bin", "tfgpu-kernel")
	testutil.NoErr(t, os.Mkdir(filepath.Dir(bin), 0o755))
	b, err := os.ReadFile(buildInstallTestBinary(t))
	testutil.NoErr(t, err)
	testutil.NoErr(t, os.WriteFile(bin, b, 0o755))
	share := sharedDir(t)
	env := append(e2eCleanEnv(), "HOME="+t.TempDir(), "PATH=/usr/bin:/bin", "XDG_DATA_HOME=")
	return &systemInstaller{t: t, srv: srv, share: share, env: env}
}

// install runs `install --system ARGS…` as root; exit code and output.
func (s *systemInstaller) install(args ...string) (int, string) {
	s.t.Helper()
	script := `mount --bind "$1" /srv && mount --bind "$2" /usr/local/share && shift 2 && exec "$@"`
	argv := append([]string{"--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh", s.srv, s.share,
		"/srv/bin/tfgpu-kernel", "install", "--system"}, args...)
	return runAsIn(s.t, nil, "/", s.env, 2*time.Minute, "unshare", argv...)
}

// installed is the kernelspec directory name in share (on this side of
// the namespace).
func (s *systemInstaller) installed(name string) string {
	return filepath.Join(s.share, "jupyter", "kernels", name)
}

// spec writes a kernelspec dir (root's, 0755) that runs Debian's
// ipykernel with env, with a kernel.js and a logo; in the namespace it is
// /srv/<name> when dir is under srv.
func writeSpec(t *testing.T, dir string, env map[string]string) {
	t.Helper()
	testutil.NoErr(t, os.MkdirAll(dir, 0o755))
	kj, _ := json.Marshal(map[string]any{
		"argv":         []string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		"display_name": filepath.Base(dir), "language": "python", "env": env,
	})
	for n, b := range map[string][]byte{"kernel.json": kj, "kernel.js": []byte("// the kernel's own\n"), "logo-64x64.png": []byte("png")} {
		testutil.NoErr(t, os.WriteFile(filepath.Join(dir, n), b, 0o644))
	}
}

func TestSecuritySystemKernelspecIsRootsWhole(t *testing.T) {
	installJupyterPython(t)
	s := newSystemInstaller(t)
	bob := newLocalUser(t, "bob")
	bobIs := "owned by uid " + strconv.Itoa(bob.uid) + " (" + bob.name + "), not root"
	marks := sharedDir(t)
	os.Chmod(marks, 0o777)
	marker := filepath.Join(marks, "ran")
	// bob's sitecustomize: every Python that has his lib on PYTHONPATH runs it.
	bobsLib := bob.mkdir(t, filepath.Join(bob.home, "lib"), 0o755)
	bob.own(t, filepath.Join(bobsLib, "sitecustomize.py"), []byte("import os\nopen("+strconv.Quote(marker)+", 'w').write('uid %d' % os.getuid())\n"), 0o644)

	for _, tc := range []struct {
		name string
		// plant makes the kernelspec and returns the directory to wrap
		// (as seen in the namespace) and the refusal's words.
		plant func(t *testing.T) (wrap, want string)
	}{
		{"bob's kernel.json", func(t *testing.T) (string, string) {
			writeSpec(t, filepath.Join(s.srv, "bobs-json"), nil)
			bob.own(t, filepath.Join(s.srv, "bobs-json", "kernel.json"), readInstallFile(t, filepath.Join(s.srv, "bobs-json", "kernel.json")), 0o644)
			return "/srv/bobs-json", "/srv/bobs-json/kernel.json is " + bobIs
		}},
		{"bob's kernel.js", func(t *testing.T) (string, string) {
			writeSpec(t, filepath.Join(s.srv, "bobs-js"), nil)
			bob.own(t, filepath.Join(s.srv, "bobs-js", "kernel.js"), []byte("alert(document.cookie)\n"), 0o644)
			return "/srv/bobs-js", "/srv/bobs-js/kernel.js is " + bobIs
		}},
		{"bob's logo", func(t *testing.T) (string, string) {
			writeSpec(t, filepath.Join(s.srv, "bobs-logo"), nil)
			bob.own(t, filepath.Join(s.srv, "bobs-logo", "logo-64x64.png"), []byte("png"), 0o644)
			return "/srv/bobs-logo", "/srv/bobs-logo/logo-64x64.png is " + bobIs
		}},
		{"a spec directory everyone can write", func(t *testing.T) (string, string) {
			writeSpec(t, filepath.Join(s.srv, "open"), nil)
			os.Chmod(filepath.Join(s.srv, "open"), 0o777)
			return "/srv/open", "/srv/open is writable by its group and everyone (mode 0777)"
		}},
		{"bob's own kernelspec, in his home", func(t *testing.T) (string, string) {
			dir := filepath.Join(bob.home, "kernels", "mine")
			writeSpec(t, dir, nil)
			exec.Command("chown", "-R", strconv.Itoa(bob.uid)+":"+strconv.Itoa(bob.gid), filepath.Join(bob.home, "kernels")).Run()
			return dir, dir + "/kernel.json is " + bobIs
		}},
		{"env PYTHONPATH into bob's home", func(t *testing.T) (string, string) {
			writeSpec(t, filepath.Join(s.srv, "py-env"), map[string]string{"PYTHONPATH": "/usr/lib/python3/dist-packages:" + bobsLib})
			return "/srv/py-env", "env PYTHONPATH=/usr/lib/python3/dist-packages:" + bobsLib + " cannot serve every user: " + bobsLib + " is " + bobIs
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wrap, want := tc.plant(t)
			code, out := s.install("--wrap", wrap)
			out = strings.TrimSpace(out)
			t.Logf("exit %d: %s", code, out)
			if code != 2 || strings.Contains(out, "\n") || !strings.HasPrefix(out, "tfgpu-kernel install: ") || !strings.Contains(out, want) {
				t.Errorf("want exit 2 and one line with %q; got exit %d:\n%s", want, code, out)
			}
			if ents, _ := os.ReadDir(s.share); len(ents) > 0 {
				t.Errorf("a refused install wrote into /usr/local/share: %v", ents)
				os.RemoveAll(filepath.Join(s.share, "jupyter"))
			}
		})
	}
	markerGone(t, marker, "bob's sitecustomize")

	// The same kernelspec, root's whole (an env of root's directories),
	// installs with its kernel.js and logo; an upgrade re-reads it, and
	// refuses once a file in it is bob's, leaving the installed one as it was.
	writeSpec(t, filepath.Join(s.srv, "roots"), map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "MPLBACKEND": "Agg"})
	code, out := s.install("--wrap", "/srv/roots")
	dir := s.installed("roots-tfgpu")
	if code != 0 || !strings.Contains(out, `installed kernelspec "roots-tfgpu"`) {
		t.Fatalf("root's own kernelspec: exit %d\n%s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "kernel.js")); err != nil || string(b) != "// the kernel's own\n" {
		t.Errorf("kernel.js not copied: %q, %v", b, err)
	}
	before := readInstallFile(t, filepath.Join(dir, "kernel.json"))
	os.Lchown(filepath.Join(s.srv, "roots", "kernel.js"), bob.uid, bob.gid)
	code, out = s.install("--replace", "--name", "roots-tfgpu")
	want := "/srv/roots/kernel.js is " + bobIs
	if code != 2 || !strings.Contains(out, want) {
		t.Errorf("upgrade with bob's kernel.js: want exit 2 and %q; got exit %d\n%s", want, code, out)
	}
	if after := readInstallFile(t, filepath.Join(dir, "kernel.json")); string(after) != string(before) {
		t.Errorf("a refused upgrade changed the kernelspec:\n%s\nwas\n%s", after, before)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "kernel.js")); string(b) != "// the kernel's own\n" {
		t.Errorf("a refused upgrade changed kernel.js: %q", b)
	}
}
