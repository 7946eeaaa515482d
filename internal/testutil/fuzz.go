package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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
			err := cmd.Run()
			if err != nil && fuzztimeRace(out.String()) {
				// Go's fuzzing coordinator (before Go 1.27) can report the
				// end of -fuzztime itself as a failure: a bare "context
				// deadline exceeded" at the deadline, no input written
				// (golang/go#75804). The target ran its time and found
				// nothing; a real crasher always writes its input.
				t.Logf("%s explored for %v; go test then reported the end of -fuzztime as %q (golang/go#75804, no input written)", target, d, "context deadline exceeded")
				return
			}
			if err != nil {
				t.Fatalf("go test -fuzz %s -fuzztime %v: %v\n%s", target, d, err, out.String())
			}
			t.Logf("%s explored for %v", target, d)
		})
	}
}

// fuzztimeRace reports whether a failed `go test -fuzz` run's output is
// golang/go#75804's and nothing else: the failure is the coordinator's
// "context deadline exceeded", and no failing input was written.
func fuzztimeRace(out string) bool {
	return strings.Contains(out, "\n    context deadline exceeded\n") &&
		!strings.Contains(out, "Failing input written to") && !strings.Contains(out, "panic:")
}
