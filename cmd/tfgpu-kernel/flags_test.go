package main

import (
	"flag"
	"testing"
	"time"
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
	if got := envName("inner-transport"); got != "TFGPU_INNER_TRANSPORT" {
		t.Fatalf("envName = %q", got)
	}
}
