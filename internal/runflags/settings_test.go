package runflags

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// run --settings FILE (the wheel's launcher gives it first): the file's
// run flags count as a kernelspec's argv, its env is set; a bad file is
// run's refusal, said in the notebook.
func TestRunSettingsFile(t *testing.T) {
	dir := t.TempDir()
	conn := filepath.Join(dir, "kernel-settings.json")
	if err := jmsg.WriteFile(conn, &jmsg.ConnInfo{Transport: "tcp", IP: "127.0.0.1", Ports: [5]int{1, 2, 3, 4, 5},
		Key: "k", SignatureScheme: "hmac-sha256"}); err != nil {
		t.Fatal(err)
	}
	kernel := []string{"-f", conn, "--", "/usr/bin/python3", "-m", "ipykernel_launcher", "-f", conn}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		testutil.NoErr(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	good := write("good.json", `{"run_flags": ["--memory-limit", "8G", "--kill-timeout", "3s"], "env": {"WHEEL_SETTING": "kept"}}`)
	t.Setenv("WHEEL_SETTING", "")
	var cfgOK bool
	stderr := captureStderr(t, func() {
		c, _, ok := Config("run", append([]string{"--settings", good, "--kill-timeout", "4s"}, kernel...))
		cfgOK = ok && c.Refusal == "" && c.MemoryLimit == 8<<30 && c.KillTimeout.String() == "4s" &&
			slices.Equal(c.StandbyArgs[:2], []string{"--settings", good})
	})
	if !cfgOK || stderr != "" || os.Getenv("WHEEL_SETTING") != "kept" {
		t.Fatalf("good settings: ok %v, stderr %q, WHEEL_SETTING=%q", cfgOK, stderr, os.Getenv("WHEEL_SETTING"))
	}
	if _, _, ok := Config("run", append([]string{"--settings", filepath.Join(dir, "gone.json")}, kernel...)); !ok {
		t.Fatal("a settings file gone since the launcher looked is the defaults")
	}
	for name, tc := range map[string]struct{ content, want string }{
		"not json":       {"{", "bad.json: unexpected EOF"},
		"unknown key":    {`{"run_flag": []}`, `unknown field "run_flag"`},
		"odd flags":      {`{"run_flags": ["--memory-limit"]}`, "are not --flag value pairs"},
		"not a run flag": {`{"run_flags": ["--state-dir", "/x"]}`, "--state-dir is no run flag a kernelspec may carry"},
		"bad value":      {`{"run_flags": ["--memory-limit", "1K"]}`, `--memory-limit "1K"`},
		"typo'd env":     {`{"env": {"TFGPU_MEMORY_LIMT": "8G"}}`, "TFGPU_MEMORY_LIMT: tfgpu-kernel run has no such setting"},
	} {
		t.Run(name, func(t *testing.T) {
			p := write("bad.json", tc.content)
			var refusal string
			var ok bool
			stderr := captureStderr(t, func() {
				var c = struct{ Refusal string }{}
				cfg, _, k := Config("run", append([]string{"--settings", p}, kernel...))
				c.Refusal, ok = cfg.Refusal, k
				refusal = c.Refusal
			})
			if !ok || !strings.Contains(refusal, tc.want) || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("ok %v, refusal %q, stderr %q; want a refusal saying %q", ok, refusal, stderr, tc.want)
			}
		})
		os.Unsetenv("TFGPU_MEMORY_LIMT")
	}
}
