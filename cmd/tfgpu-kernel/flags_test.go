package main

import (
	"flag"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/runflags"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

func TestRunFlagsComeFromTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		wantDone bool
		check    func(t *testing.T, level string, grace time.Duration)
	}{
		{name: "env sets an unset flag", env: map[string]string{"TFGPU_LOG_LEVEL": "debug", "TFGPU_SHUTDOWN_GRACE": "250ms"},
			check: func(t *testing.T, level string, grace time.Duration) {
				if level != "debug" || grace != 250*time.Millisecond {
					t.Fatalf("level %q grace %v", level, grace)
				}
			}},
		{name: "command line wins over env", env: map[string]string{"TFGPU_LOG_LEVEL": "debug"}, args: []string{"--log-level", "warn"},
			check: func(t *testing.T, level string, _ time.Duration) {
				if level != "warn" {
					t.Fatalf("level %q, want the flag's warn", level)
				}
			}},
		{name: "bad env value is a usage error", env: map[string]string{"TFGPU_SHUTDOWN_GRACE": "soon"}, wantCode: 2, wantDone: true},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: 2, wantDone: true},
		{name: "help", args: []string{"--help"}, wantCode: 0, wantDone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			level := fs.String("log-level", "info", "")
			grace := fs.Duration("shutdown-grace", time.Second, "")
			_, code, done := parseFlags(fs, tc.args, "")
			if code != tc.wantCode || done != tc.wantDone {
				t.Fatalf("parseFlags = %d, %v; want %d, %v", code, done, tc.wantCode, tc.wantDone)
			}
			if tc.check != nil {
				tc.check(t, *level, *grace)
			}
		})
	}
	if got := runflags.EnvName("inner-transport"); got != "TFGPU_INNER_TRANSPORT" {
		t.Fatalf("runflags.EnvName = %q", got)
	}
}

// Every command's help names its flags as users type them and as the
// README writes them (--format, -f), and parse errors do too, with a
// valid example where a value was wrong.
func TestHelpAndErrorsAreGNUStyle(t *testing.T) {
	bin := buildInstallTestBinary(t)
	singleDashLong := regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+`)
	for _, cmd := range []string{"run", "install", "ps", "stop", "doctor"} {
		r := runInstallBin(t, os.Environ(), bin, cmd, "--help")
		help := r.stdout + r.stderr
		if r.code != 0 || !strings.Contains(help, "usage: tfgpu-kernel "+cmd) || !strings.Contains(help, "  --") {
			t.Errorf("%s --help: exit %d\n%s", cmd, r.code, help)
		}
		if m := singleDashLong.FindString(help); m != "" {
			t.Errorf("%s --help names a flag with one dash: %q", cmd, m)
		}
	}
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"ps", "--bogus"}, "", `tfgpu-kernel ps: unknown flag --bogus (see 'tfgpu-kernel ps --help')`},
		{[]string{"stop", "--timeout"}, "", `tfgpu-kernel stop: --timeout needs a value`},
		{[]string{"stop", "--timeout", "soon", "x"}, "", `tfgpu-kernel stop: --timeout "soon": want a duration such as 1.5s, 500ms or 2h`},
		{[]string{"stop", "--timeout=-1s", "x"}, "", `tfgpu-kernel stop: --timeout -1s: give a positive duration, e.g. 15s`},
		{[]string{"ps", "--json=maybe"}, "", `tfgpu-kernel ps: --json "maybe": want true or false`},
		{[]string{"run", "-f", "x", "--", "y"}, "TFGPU_GPU_MEMORY_LIMIT=abc", `tfgpu-kernel run: TFGPU_GPU_MEMORY_LIMIT "abc": want a size such as 8G or 300M`},
		{[]string{"run", "-f", "x", "--", "y"}, "TFGPU_KILL_TIMEOUT=5", `tfgpu-kernel run: TFGPU_KILL_TIMEOUT="5": want a duration such as 1.5s, 500ms or 2h`},
		{[]string{"run", "-f", "x", "--", "y"}, "TFGPU_MEMORY_LIMT=8G", `tfgpu-kernel run: TFGPU_MEMORY_LIMT: tfgpu-kernel run has no such setting (it reads TFGPU_CGROUP, TFGPU_MEMORY_LIMIT, `},
		{[]string{"run", "-f", "x", "--memory-limit", "64M", "--", "y"}, "", `tfgpu-kernel run: --memory-limit "64M": too small for any kernel`},
		{[]string{"install", "--kill-timeout", "5"}, "", `tfgpu-kernel install: --kill-timeout "5": want a duration such as 1.5s, 500ms or 2h`},
	} {
		env := append(os.Environ(), "TFGPU_STATE_DIR="+testutil.PrivateDir(t))
		if tc.env != "" {
			env = append(env, tc.env)
		}
		r := runInstallBin(t, env, bin, tc.args...)
		if r.code != 2 || r.stdout != "" || !isInstallErrLine(r.stderr, tc.want) {
			t.Errorf("%q (%s): exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, tc.env, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	for _, arg := range []string{"--version", "-V", "version"} {
		if r := runInstallBin(t, os.Environ(), bin, arg); r.code != 0 || !strings.HasPrefix(r.stdout, "tfgpu-kernel ") || strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("%s: exit %d, %q", arg, r.code, r.stdout)
		}
	}
}

func TestBuildVersion(t *testing.T) {
	info := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: settings}, true }
	}
	for _, tc := range []struct {
		v    string
		info func() (*debug.BuildInfo, bool)
		want string
	}{
		{"v1.2.3", info(), "v1.2.3"},
		{"dev", info(), "dev"},
		{"dev", info(debug.BuildSetting{Key: "vcs.revision", Value: "0123456789abcdef0123"}), "dev (0123456789ab)"},
		{"dev", info(debug.BuildSetting{Key: "vcs.revision", Value: "abc"}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "dev (abc, modified)"},
		{"dev", func() (*debug.BuildInfo, bool) { return nil, false }, "dev"},
	} {
		if got := buildVersion(tc.v, tc.info); got != tc.want {
			t.Errorf("buildVersion(%q) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
