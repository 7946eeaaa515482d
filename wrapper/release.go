package wrapper

import (
	"slices"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
)

// The facts of a GPU release for the notebook's page
// (docs/operating.md#usage-in-the-notebook, labextension/): what the last
// release check this supervisor made found, in the figures the JupyterLab
// extension shows. They reach the page two ways, because the supervisor
// that confirms a release is not always there to be asked:
//
//   - Restart: jupyter_client starts a new supervisor, which confirms the
//     previous tree's release before its kernel starts (takeHandoff); its
//     usage_reply carries the facts as "tfgpu_release" from then on.
//   - Shut Down, and a kernel's death: the supervisor confirms, then
//     exits; it publishes the facts on iopub first, as a message of its
//     own, msg_type "tfgpu_release", which the page receives before the
//     server closes the kernel's channels (publishRelease).

// releaseMsgType is the iopub message type of publishRelease, and the
// usage_reply field of the facts.
const releaseMsgType = "tfgpu_release"

// releaseFacts is one release check's outcome, as JSON for the page.
type releaseFacts struct {
	// Event is "restart", "shutdown", or why the kernel stopped ("kernel
	// died", "over its GPU memory limit", "SIGTERM", …).
	Event string `json:"event"`
	// At is when the check ended, RFC 3339 with milliseconds, UTC.
	At string `json:"at"`
	// Confirmed is true when NVML listed none of the old tree within the
	// confirm timeout (Held is then empty).
	Confirmed bool `json:"confirmed"`
	// Released is, per device, what the tree held before it was killed
	// and NVML no longer lists; -1 where NVML gave no figure.
	Released []releaseDev `json:"released"`
	// Held is, per device, what NVML still lists of the old tree, and
	// whose it is.
	Held []heldDev `json:"held"`
	// TookMS is how long the check took, in milliseconds.
	TookMS int64 `json:"took_ms"`
	// Error is NVML's error when the check could not be made (Confirmed
	// is then false and Held empty: nothing is known).
	Error string `json:"error,omitempty"`

	old *gpu.Old // the tree the facts are about, for publishRelease
}

type releaseDev struct {
	Index int   `json:"index"`
	Bytes int64 `json:"bytes"`
}

type heldDev struct {
	Index int   `json:"index"`
	Bytes int64 `json:"bytes"`
	PIDs  []int `json:"pids"`
}

// newReleaseFacts turns a release check's result into the page's facts.
func newReleaseFacts(event string, res gpu.Result, err error, at time.Time) *releaseFacts {
	f := &releaseFacts{Event: event, At: at.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		TookMS: res.Took.Milliseconds(), Released: []releaseDev{}, Held: []heldDev{}}
	if err != nil {
		f.Error = err.Error()
		return f
	}
	held := gpu.Sum(res.Held)
	for _, d := range sortedDevices(held) {
		h := heldDev{Index: d, Bytes: held[d], PIDs: []int{}}
		for _, x := range res.Held {
			if x.Device == d && !slices.Contains(h.PIDs, x.PID) {
				h.PIDs = append(h.PIDs, x.PID)
			}
		}
		slices.Sort(h.PIDs)
		f.Held = append(f.Held, h)
	}
	for _, d := range sortedDevices(res.Released) {
		b := res.Released[d]
		if still, ok := held[d]; ok {
			if b < 0 || still < 0 {
				continue // no figures: what is held is all that is said
			}
			b -= still
		}
		if b != 0 {
			f.Released = append(f.Released, releaseDev{Index: d, Bytes: b})
		}
	}
	f.Confirmed = len(res.Held) == 0
	return f
}

func sortedDevices(m map[int]int64) []int {
	out := make([]int, 0, len(m))
	for d := range m {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// publishRelease publishes, on iopub, the facts of the release check this
// stop made about old, so that the page of a notebook whose kernel is
// shut down (or died) can say what was released: the supervisor is gone
// before anyone could ask it. A restart's facts are the next supervisor's
// to give (takeHandoff, then its usage_reply), and a stop without a check
// (no NVML, nothing watched) has none.
func (s *supervisor) publishRelease(c cause, old *gpu.Old) {
	f := s.releaseToPublish(c, old)
	if f == nil || s.relay == nil {
		return
	}
	if err := s.relay.Publish(s.id, releaseMsgType, f); err != nil {
		s.log.Debug("cannot publish the GPU release", "err", err)
	}
}

// releaseToPublish is the facts of the check this stop made about old,
// nil when there are none to publish.
func (s *supervisor) releaseToPublish(c cause, old *gpu.Old) *releaseFacts {
	if f := s.gpu.last; !c.restart() && old != nil && f != nil && f.old == old {
		return f
	}
	return nil
}
