package testutil

import "testing"

// The toolchain's report at the end of -fuzztime is told apart from a
// crasher: only a bare "context deadline exceeded" with no input written.
func TestFuzztimeRace(t *testing.T) {
	race := "fuzz: elapsed: 20s, execs: 413627 (20735/sec), new interesting: 0 (total: 44)\n--- FAIL: FuzzSplit (20.08s)\n    context deadline exceeded\nFAIL\nexit status 1\n"
	crash := "--- FAIL: FuzzSplit (3.01s)\n    --- FAIL: FuzzSplit (0.00s)\n        testing.go:1: boom\n    Failing input written to testdata/fuzz/FuzzSplit/abc\n    To re-run:\n"
	panicked := "--- FAIL: FuzzSplit (20.08s)\n    context deadline exceeded\npanic: runtime error: index out of range\n"
	if !fuzztimeRace(race) {
		t.Error("the coordinator's deadline report was taken for a failure")
	}
	for name, out := range map[string]string{"crasher": crash, "panic": panicked} {
		if fuzztimeRace(out) {
			t.Errorf("a %s was taken for the coordinator's deadline report", name)
		}
	}
}
