package fakesystemd

import "testing"

// TestRunRefusesWhatSystemdRunWould: the fake systemd-run takes the
// arguments scopeTree.Launch passes and no others, and refuses a command
// line systemd-run would refuse before it asks the manager for anything (no
// XDG_RUNTIME_DIR is needed to get there), so a change to what the
// supervisor passes fails the tests instead of passing unread.
func TestRunRefusesWhatSystemdRunWould(t *testing.T) {
	for _, args := range [][]string{
		{"--user", "--scope", "--unit=a.scope", "--bogus", "--", "/bin/true"},
		{"--user", "--scope", "--unit=a.scope", "-p"},
		{"--scope", "--unit=a.scope", "--", "/bin/true"},
		{"--user", "--unit=a.scope", "--", "/bin/true"},
		{"--user", "--scope", "--", "/bin/true"},
		{"--user", "--scope", "--unit=a.scope", "--"},
		{"--user", "--scope", "--unit=a.scope"},
	} {
		if code := Run(args); code != 1 {
			t.Errorf("Run(%q) = %d, want 1", args, code)
		}
	}
}
