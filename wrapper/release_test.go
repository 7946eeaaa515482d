package wrapper

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The facts the notebook's page shows after a Restart or Shut Down
// (labextension/src/format.ts reads them): what was released per device,
// what is still held and by whom, as JSON with stable field names.
func TestReleaseFactsSayWhatWasReleasedAndWhatIsHeld(t *testing.T) {
	const mib, gib = 1 << 20, 1 << 30
	at := time.Date(2026, 12, 5, 7, 0, 1, 234e6, time.UTC)
	for _, tc := range []struct {
		name string
		res  gpu.Result
		err  error
		want string
	}{
		{name: "all released",
			res:  gpu.Result{Took: 1234 * time.Millisecond, Released: map[int]int64{0: gib, 1: 512 * mib}},
			want: `{"event":"restart","at":"2026-12-05T07:00:01.234Z","confirmed":true,"released":[{"index":0,"bytes":1073741824},{"index":1,"bytes":536870912}],"held":[],"took_ms":1234}`},
		{name: "nothing held",
			res:  gpu.Result{Took: 3 * time.Millisecond, Released: map[int]int64{}},
			want: `{"event":"restart","at":"2026-12-05T07:00:01.234Z","confirmed":true,"released":[],"held":[],"took_ms":3}`},
		{name: "one device still held",
			res: gpu.Result{Took: 10 * time.Second, Released: map[int]int64{0: gib, 1: 512 * mib},
				Held: []gpu.Holder{{Device: 1, PID: 42, Bytes: 256 * mib}, {Device: 1, PID: 41, Bytes: 256 * mib}}},
			want: `{"event":"restart","at":"2026-12-05T07:00:01.234Z","confirmed":false,"released":[{"index":0,"bytes":1073741824}],"held":[{"index":1,"bytes":536870912,"pids":[41,42]}],"took_ms":10000}`},
		{name: "no per-process figures",
			res: gpu.Result{Took: time.Second, Released: map[int]int64{0: -1, 1: -1},
				Held: []gpu.Holder{{Device: 1, PID: 7, Bytes: -1}}},
			want: `{"event":"restart","at":"2026-12-05T07:00:01.234Z","confirmed":false,"released":[{"index":0,"bytes":-1}],"held":[{"index":1,"bytes":-1,"pids":[7]}],"took_ms":1000}`},
		{name: "NVML failed",
			res:  gpu.Result{Took: 5 * time.Millisecond, Released: map[int]int64{0: gib}},
			err:  errors.New("nvmlDeviceGetComputeRunningProcesses: GPU is lost"),
			want: `{"event":"restart","at":"2026-12-05T07:00:01.234Z","confirmed":false,"released":[],"held":[],"took_ms":5,"error":"nvmlDeviceGetComputeRunningProcesses: GPU is lost"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(newReleaseFacts("restart", tc.res, tc.err, at))
			testutil.NoErr(t, err)
			if string(b) != tc.want {
				t.Errorf("facts\n got %s\nwant %s", b, tc.want)
			}
		})
	}
}

// The usage_reply carries the last release this supervisor confirmed
// (after a Restart: the previous tree's), as an object in the content the
// relay re-encodes.
func TestUsageReplyCarriesTheLastRelease(t *testing.T) {
	f := newReleaseFacts("restart", gpu.Result{Released: map[int]int64{0: 1 << 30}}, nil, time.Now())
	content := map[string]any{"hostname": "h"}
	mergeUsage(content, usageFigures{set: map[string]any{releaseMsgType: f}})
	b, err := json.Marshal(content)
	testutil.NoErr(t, err)
	var back struct {
		Release struct {
			Event     string `json:"event"`
			Confirmed bool   `json:"confirmed"`
			Released  []struct {
				Index int   `json:"index"`
				Bytes int64 `json:"bytes"`
			} `json:"released"`
		} `json:"tfgpu_release"`
	}
	testutil.NoErr(t, json.Unmarshal(b, &back))
	if r := back.Release; r.Event != "restart" || !r.Confirmed || len(r.Released) != 1 || r.Released[0].Bytes != 1<<30 {
		t.Fatalf("usage_reply content %s", b)
	}
}

// Only the facts of the check this stop made are published: not a
// restart's (the next supervisor gives them), not an older check's (this
// supervisor's start confirmed the previous tree), not without a check.
func TestPublishReleaseOnlyThisStopsCheck(t *testing.T) {
	old, other := &gpu.Old{}, &gpu.Old{}
	mine := newReleaseFacts("shutdown", gpu.Result{}, nil, time.Now())
	mine.old = old
	for _, tc := range []struct {
		name string
		c    cause
		old  *gpu.Old
		last *releaseFacts
		want bool
	}{
		{name: "shutdown", c: cause{reason: "shutdown", request: &shutdownRequest{}}, old: old, last: mine, want: true},
		{name: "kernel died", c: cause{reason: "kernel died", died: true}, old: old, last: mine, want: true},
		{name: "restart", c: cause{request: &shutdownRequest{}}, old: old, last: mine},
		{name: "no check", c: cause{reason: "shutdown"}, old: nil, last: mine},
		{name: "no facts", c: cause{reason: "shutdown"}, old: old, last: nil},
		{name: "another tree's facts", c: cause{reason: "shutdown"}, old: other, last: mine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "restart" {
				tc.c.request.Restart = true
			}
			s := &supervisor{gpu: &gpuCheck{last: tc.last}}
			if got := s.releaseToPublish(tc.c, tc.old); (got != nil) != tc.want {
				t.Fatalf("publishes %v, want %v", got != nil, tc.want)
			}
		})
	}
}
