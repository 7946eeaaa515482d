//go:build linux && e2e

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Hostile local peers: a user of the same host who can reach the kernel's
// five TCP ports but has no HMAC key attacks a running kernel with raw ZMTP
// and pyzmq; the supervisor must survive each attack, be idle and within its
// RSS bound afterwards, and keep answering the client that was connected
// before. One subtest per mode of testdata/e2e/hostile.py (its docstring
// lists the attacks and bounds).
//
// The suite takes about 6 minutes on a 2-core host, soak (200 restarts)
// 3.5 of them and churn 40 s; each subtest's timeout is generous, and is
// cut to what go test's -timeout leaves, so that a scenario is always
// reaped:
//
//	go test -tags e2e ./cmd/tfgpu-kernel -run TestE2EHostile -v -timeout 30m
//
// -short skips churn and soak. E2E_CHURN_CYCLES (default 1000) and
// E2E_SOAK_RESTARTS (default 200) scale those two (and their timeouts).
func TestE2EHostile(t *testing.T) {
	s := e2eSetup(t)
	churn := e2eEnvInt(t, "E2E_CHURN_CYCLES", 1000)
	restarts := e2eEnvInt(t, "E2E_SOAK_RESTARTS", 200)
	for _, m := range []struct {
		mode    string
		timeout time.Duration
		long    bool
	}{
		{"rawclient", 60 * time.Second, false},
		{"bigframe", 120 * time.Second, false},
		{"badcmd", 120 * time.Second, false},
		{"silent", 120 * time.Second, false},
		{"iopubjunk", 120 * time.Second, false},
		{"topics", 180 * time.Second, false},
		{"pings", 120 * time.Second, false},
		{"subscribers", 120 * time.Second, false},
		{"identity", 120 * time.Second, false},
		{"forged", 120 * time.Second, false},
		{"garbage", 120 * time.Second, false},
		{"fdlimit", 120 * time.Second, false},
		{"churn", max(300*time.Second, 60*time.Second+time.Duration(churn)*240*time.Millisecond), true},
		{"soak", max(600*time.Second, 60*time.Second+time.Duration(restarts)*2700*time.Millisecond), true},
	} {
		t.Run(m.mode, func(t *testing.T) {
			if m.long && testing.Short() {
				t.Skip("-short")
			}
			timeout := m.timeout
			// The scenario must end (and its processes be reaped) before
			// the test binary's own deadline panics.
			if d, ok := t.Deadline(); ok {
				left := time.Until(d) - 30*time.Second
				if left < 30*time.Second {
					t.Fatalf("only %v left before go test's -timeout; raise it (the suite takes ~20 min)", time.Until(d).Round(time.Second))
				}
				timeout = min(timeout, left)
			}
			hs := *s
			hs.env = append(append([]string{}, s.env...),
				"E2E_CHURN_CYCLES="+strconv.Itoa(churn), "E2E_SOAK_RESTARTS="+strconv.Itoa(restarts))
			hs.scenario(t, timeout, "hostile.py", m.mode)
		})
	}
}

// e2eEnvInt reads a positive count from the environment (e2eCleanEnv keeps
// E2E_* variables from the scenarios, so the test passes them on itself).
func e2eEnvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// Keyless peers of another real user (useradd), on both stacks: attacks A
// (the receive budget), B (a client's identity) and G (a slow iopub
// reader) of docs/security.md#threats, each in testdata/e2e/peers.py. The
// attacker runs testdata/e2e/peers_attack.py as that user.
func TestE2EKeylessPeers(t *testing.T) {
	eachStack(t, func(t *testing.T, stack string) {
		s := e2eSetupStack(t, stack)
		u := newLocalUser(t, "peer")
		shared := sharedDir(t)
		for _, name := range []string{"peers_attack.py", "zmtpraw.py"} {
			src, err := os.ReadFile(filepath.Join(s.scripts, name))
			testutil.NoErr(t, err)
			testutil.NoErr(t, os.WriteFile(filepath.Join(shared, name), src, 0o644))
		}
		script := filepath.Join(shared, "peers_attack.py")
		for _, mode := range []string{"budget", "claim", "slowsub"} {
			t.Run(mode, func(t *testing.T) {
				ps := *s
				ps.env = append(append([]string{}, s.env...),
					fmt.Sprintf("E2E_ATTACKER=%d:%d", u.uid, u.gid), "E2E_ATTACK_SCRIPT="+script)
				ps.scenario(t, 180*time.Second, "peers.py", mode)
			})
		}
	})
}
