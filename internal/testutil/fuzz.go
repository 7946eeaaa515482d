package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// DefaultFuzzTime is how long ExploreFuzz runs each target unless
// TFGPU_FUZZTIME says otherwise (a Go duration: 2m, 20s).
const DefaultFuzzTime = 20 * time.Second

// ExploreFuzz runs each fuzz target of the calling test's package with
// `go test -fuzz` for the fuzz time, one worker each (the full suite runs
// it beside the end-to-end tests), as a subtest: go test replays the seed
// corpora anyway, this explores further. A crash fails the subtest with
// the fuzzer's report and leaves its input under testdata/fuzz, to be
// committed as a seed.
func ExploreFuzz(t *testing.T, targets ...string) {
	d := DefaultFuzzTime
	if s := os.Getenv("TFGPU_FUZZTIME"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			t.Fatalf("TFGPU_FUZZTIME=%q: want a duration such as 20s", s)
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			cmd := exec.Command(goBin, "test", "-run", "^$", "-fuzz", "^"+target+"$", "-fuzztime", d.String(), "-parallel", "1", ".")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("go test -fuzz %s -fuzztime %v: %v\n%s", target, d, err, out.String())
			}
			t.Logf("%s explored for %v", target, d)
		})
	}
}
