// Package place chooses the GPUs a kernel starts on, for --gpus auto
// (docs/design.md#placement): the GPUs, or MIG instances, with the most
// free memory by NVML, less what kernels of the same user that started
// moments ago have claimed but not yet taken.
//
// Contract: Parse reads the setting and says what is wrong with it in one
// phrase; Choose is pure (what NVML said and the claims in, the choice
// out) and always chooses when there is anything to choose from, saying
// whether the choice had the room asked for; Text is what the first cell
// is told. Where the claims live and who locks them is the caller's
// (record.Dir's placement ledger).
package place

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// MaxCount is the most GPUs auto:N chooses.
const MaxCount = 16

// Spec is a --gpus setting.
type Spec struct {
	Count   int    // GPUs to choose, 1 to MaxCount
	MinFree int64  // bytes each chosen GPU must have free; 0: no minimum
	Text    string // the setting as it was given
}

// String is the setting as it was given.
func (s Spec) String() string {
	if s.Text == "" {
		return "auto"
	}
	return s.Text
}

// Usage is the shape of a valid setting, for errors.
const Usage = "want auto, auto:N (1 to 16 GPUs), auto:min-free=SIZE or auto:N,min-free=SIZE, such as auto:2,min-free=20G"

// Parse reads a --gpus setting: "" is off (ok false), "auto" one GPU,
// "auto:2" two, "auto:min-free=20G" one with at least 20 GiB free,
// "auto:2,min-free=20G" both. The error is a phrase saying what is wrong;
// the caller names the setting as the user gave it.
func Parse(s string) (spec Spec, ok bool, err error) {
	if s == "" {
		return Spec{}, false, nil
	}
	rest, found := strings.CutPrefix(s, "auto")
	if !found || (rest != "" && rest[0] != ':') {
		return Spec{}, false, fmt.Errorf("%s", Usage)
	}
	spec.Count, spec.Text = 1, s
	if rest == "" {
		return spec, true, nil
	}
	counted := false
	for _, opt := range strings.Split(rest[1:], ",") {
		switch v, isMin := strings.CutPrefix(opt, "min-free="); {
		case isMin:
			if spec.MinFree != 0 {
				return Spec{}, false, fmt.Errorf("min-free given twice; %s", Usage)
			}
			b, err := bytesize.Parse(v)
			if err != nil {
				return Spec{}, false, err
			}
			if b <= 0 {
				return Spec{}, false, fmt.Errorf("min-free=%s: want a size above 0, such as 20G", v)
			}
			spec.MinFree = b
		default:
			n, err := strconv.Atoi(opt)
			if err != nil || counted || n < 1 || n > MaxCount {
				return Spec{}, false, fmt.Errorf("%q: %s", opt, Usage)
			}
			spec.Count, counted = n, true
		}
	}
	return spec, true, nil
}

// Candidate is a unit NVML offered, with what kernels starting just now
// have claimed of it.
type Candidate struct {
	gpu.Unit
	Pending uint64 // bytes claimed by the user's kernels that started moments ago
}

// Room is the free memory less the pending claims.
func (c Candidate) Room() uint64 {
	if c.Pending >= c.Free {
		return 0
	}
	return c.Free - c.Pending
}

// Choice is what Choose chose.
type Choice struct {
	Spec   Spec
	Chosen []Candidate // best first; fewer than Spec.Count only when fewer were offered
	// Enough: each chosen unit had Spec.MinFree of room, and there were
	// Spec.Count of them.
	Enough bool
	Others []Candidate // the units not chosen, best first
}

// Choose ranks the units by room (free memory less pending, the claims by
// UUID), largest first, ties by index, and takes the first spec.Count. When
// more than one is asked for, MIG instances are not offered: CUDA uses
// only the first MIG instance CUDA_VISIBLE_DEVICES names. When fewer than
// spec.Count have spec.MinFree of room, the best are chosen anyway and
// Enough is false: the kernel starts, and the first cell says why it may
// not fit.
func Choose(units []gpu.Unit, spec Spec, pending map[string]uint64) Choice {
	var cands []Candidate
	for _, u := range units {
		if spec.Count > 1 && u.MIG != 0 {
			continue
		}
		cands = append(cands, Candidate{Unit: u, Pending: pending[u.UUID]})
	}
	slices.SortStableFunc(cands, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(b.Room(), a.Room()), cmp.Compare(a.Device, b.Device), cmp.Compare(a.MIG, b.MIG))
	})
	n := min(spec.Count, len(cands))
	c := Choice{Spec: spec, Chosen: cands[:n], Others: cands[n:], Enough: n == spec.Count && n > 0}
	for _, ch := range c.Chosen {
		if ch.Room() < uint64(spec.MinFree) {
			c.Enough = false
		}
	}
	return c
}

// Visible is CUDA_VISIBLE_DEVICES for the chosen units: their UUIDs, which
// name the same GPU whatever order CUDA enumerates in.
func (c Choice) Visible() string {
	uuids := make([]string, len(c.Chosen))
	for i, u := range c.Chosen {
		uuids[i] = u.UUID
	}
	return strings.Join(uuids, ",")
}

// Claim is what a chosen unit is assumed to take until NVML shows what the
// kernel really holds: half its room (the next kernel started at once then
// goes to another GPU with as much, or shares this one fairly), or the
// minimum asked for, if more.
func Claim(c Candidate, spec Spec) uint64 {
	return max(c.Room()/2, uint64(spec.MinFree))
}

// Label names a unit as the user sees it: "GPU1", or "GPU1 MIG 0".
func Label(u gpu.Unit) string {
	if u.MIG != 0 {
		return fmt.Sprintf("GPU%d MIG %d", u.Device, u.MIG-1)
	}
	return fmt.Sprintf("GPU%d", u.Device)
}

// Text is what the first cell is told: which GPUs this kernel got and
// why, and the others' room. Lines end in a line break.
func (c Choice) Text() string {
	var b strings.Builder
	asked := "--gpus " + c.Spec.String()
	if len(c.Chosen) == 0 {
		fmt.Fprintf(&b, "tfgpu-kernel: %s: NVML lists no GPU to choose from; the kernel sees what CUDA shows it.\n", asked)
		return b.String()
	}
	names := make([]string, len(c.Chosen))
	for i, u := range c.Chosen {
		names[i] = describe(u)
	}
	list := strings.Join(names, " and ")
	switch {
	case c.Enough && len(c.Chosen) == 1:
		fmt.Fprintf(&b, "tfgpu-kernel: %s chose %s for this kernel: the most free memory.\n", asked, list)
	case c.Enough:
		fmt.Fprintf(&b, "tfgpu-kernel: %s chose %s for this kernel: the %d with the most free memory.\n", asked, list, len(c.Chosen))
	case len(c.Chosen) < c.Spec.Count:
		fmt.Fprintf(&b, "tfgpu-kernel: %s: only %d GPU(s) to choose from; this kernel runs on %s.\n", asked, len(c.Chosen), list)
	default:
		fmt.Fprintf(&b, "tfgpu-kernel: %s: no GPU has %s free; this kernel runs on %s, the most free there is, and may run out of memory.\n",
			asked, gpu.FormatBytes(c.Spec.MinFree), list)
	}
	for _, o := range c.Others {
		fmt.Fprintf(&b, "  not chosen: %s\n", describe(o))
	}
	fmt.Fprintf(&b, "CUDA_VISIBLE_DEVICES=%s\n", c.Visible())
	return b.String()
}

// describe is "GPU1 (NVIDIA H200) with 140.0 GiB free of 141.0 GiB",
// with what kernels starting at once claimed of it.
func describe(c Candidate) string {
	s := Label(c.Unit)
	if name := strings.TrimSpace(c.Name); name != "" {
		s += " (" + record.Printable(name) + ")"
	}
	s += fmt.Sprintf(" with %s free of %s", gpu.FormatBytes(int64(c.Free)), gpu.FormatBytes(int64(c.Total)))
	if c.Pending > 0 {
		s += fmt.Sprintf(", %s of it claimed by your kernels starting now", gpu.FormatBytes(int64(min(c.Pending, c.Free))))
	}
	return s
}
