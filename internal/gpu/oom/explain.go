package oom

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
)

// View is what Explain tells: the GPUs this kernel uses and who holds
// their memory, as the supervisor found them just after the error. Byte
// figures are -1 where NVML gave none.
type View struct {
	Framework Framework
	GPUs      []GPU
	// Details: the admin lets users see other users' pids and commands.
	// Without it another user's process is named by its user only.
	Details bool
}

// GPU is one GPU this kernel uses.
type GPU struct {
	Index int
	Name  string
	UUID  string
	Total int64 // bytes
	Free  int64 // bytes NVML says are free (it counts the driver's own use)
	// Own is what this kernel's own process tree holds.
	Own int64
	// Kernels are this user's other kernels holding memory here.
	Kernels []Kernel
	// Processes are other users' processes holding memory here.
	Processes []Process
	// Unseen is what processes not visible here hold (NVML lists them, but
	// they are in another container or PID namespace): one figure, 0 when
	// there are none, -1 when there are but NVML gave no figure.
	Unseen int64
}

// Kernel is another kernel of this user.
type Kernel struct {
	Notebook string // the notebook's name; "" when unknown
	ID       string
	// Idle is how long it has been idle; 0 when busy or unknown.
	Idle time.Duration
	// Stop is the exact command that frees its memory; "" is
	// StopCommand(ID).
	Stop  string
	Bytes int64
}

// Process is another user's process.
type Process struct {
	User    string
	PID     int    // shown only with View.Details
	Command string // shown only with View.Details
	Bytes   int64
}

// maxRows bounds the holder lines per GPU: with more holders, the last
// line sums the rest, so that a GPU takes at most 9 lines.
const maxRows = 8

// allocatorHint is the setting that lets a framework share a GPU, for when
// the kernel alone fills it.
var allocatorHint = map[Framework]string{
	TensorFlow: "TF_FORCE_GPU_ALLOW_GROWTH=true (TensorFlow then takes GPU memory as it needs it, not all at start)",
	JAX:        "XLA_PYTHON_CLIENT_PREALLOCATE=false (JAX then takes GPU memory as it needs it, not 75% at start)",
	PyTorch:    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less memory lost to fragmentation)",
}

// Explain is the text the supervisor adds after a GPU out-of-memory error:
// a first line, then per GPU a header (total and free) and who holds its
// memory, largest first. When nothing but this kernel holds memory on its
// GPUs it says so, with the framework's sharing-friendly allocator setting
// on one line where there is one. Plain text, no escape sequences: every
// name from elsewhere (notebook, user, command) has its control characters
// replaced and is shortened. Each line ends in a line break.
func Explain(v View) string {
	var b strings.Builder
	who := "The kernel"
	if v.Framework != "" {
		who = string(v.Framework)
	}
	if len(v.GPUs) == 0 {
		fmt.Fprintf(&b, "%s ran out of GPU memory; NVML lists no GPU for this kernel.\n", who)
		return b.String()
	}
	fmt.Fprintf(&b, "%s ran out of GPU memory. Who holds it now, largest first:\n", who)
	alone := true
	for _, g := range v.GPUs {
		alone = alone && len(g.Kernels) == 0 && len(g.Processes) == 0 && g.Unseen == 0
		writeGPU(&b, g, v.Details)
	}
	if alone {
		its := "its GPU"
		if len(v.GPUs) > 1 {
			its = "its GPUs"
		}
		fmt.Fprintf(&b, "Nothing else holds memory on %s: this kernel itself used it up.\n", its)
		if h, ok := allocatorHint[v.Framework]; ok {
			fmt.Fprintf(&b, "To share a GPU, start the kernel with %s.\n", h)
		}
	}
	return b.String()
}

// Held is who holds the memory of v's GPUs, largest first, after the
// caller's line lead: what the first cell is told when --gpus auto found
// no GPU with the room asked for.
func Held(lead string, v View) string {
	var b strings.Builder
	b.WriteString(lead)
	for _, g := range v.GPUs {
		writeGPU(&b, g, v.Details)
	}
	return b.String()
}

// row is one holder of a GPU's memory.
type row struct {
	bytes int64
	what  string
}

func writeGPU(b *strings.Builder, g GPU, details bool) {
	fmt.Fprintf(b, "GPU%d", g.Index)
	if name := clean(g.Name, 60); name != "" {
		b.WriteString(" " + name)
	}
	if uuid := clean(g.UUID, 60); uuid != "" {
		b.WriteString(" (" + uuid + ")")
	}
	fmt.Fprintf(b, ": %s total, %s free\n", formatBytes(g.Total), formatBytes(g.Free))

	rows := []row{{g.Own, "this kernel"}}
	for _, k := range g.Kernels {
		rows = append(rows, row{k.Bytes, kernelText(k)})
	}
	for _, p := range g.Processes {
		rows = append(rows, row{p.Bytes, processText(p, details)})
	}
	if g.Unseen != 0 {
		rows = append(rows, row{g.Unseen, "processes not visible here (other containers)"})
	}
	// Largest first; an unknown figure (-1) last; ties as listed above.
	slices.SortStableFunc(rows, func(a, b row) int { return compareDesc(a.bytes, b.bytes) })
	if len(rows) > maxRows {
		rest := rows[maxRows-1:]
		sum := int64(0)
		for _, r := range rest {
			if r.bytes < 0 || sum < 0 {
				sum = -1
				continue
			}
			sum += r.bytes
		}
		rows = append(rows[:maxRows-1], row{sum, fmt.Sprintf("%d more holders", len(rest))})
	}
	for _, r := range rows {
		fmt.Fprintf(b, "  %-10s %s\n", formatBytes(r.bytes), r.what)
	}
}

func compareDesc(a, b int64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// kernelText names another kernel of this user by its notebook and a
// short id (the full one is in the command that frees it).
func kernelText(k Kernel) string {
	id := clean(k.ID, 40)
	if short := []rune(id); len(short) > 8 {
		id = string(short[:8])
	}
	s := "your kernel " + id
	if nb := clean(k.Notebook, 60); nb != "" {
		s = "your notebook " + nb + " (kernel " + id + ")"
	}
	if k.Idle > 0 {
		s += ", idle " + idle(k.Idle)
	}
	stop := k.Stop
	if stop == "" {
		stop = StopCommand(k.ID)
	}
	return s + "; free it with: " + clean(stop, 120)
}

func processText(p Process, details bool) string {
	s := "another user"
	if u := clean(p.User, 32); u != "" {
		s = "user " + u
	}
	if !details {
		return s
	}
	if p.PID > 0 {
		s += fmt.Sprintf(", pid %d", p.PID)
	}
	if c := clean(p.Command, 60); c != "" {
		s += ": " + c
	}
	return s
}

// StopCommand is the command that stops kernel id and frees its GPU
// memory, quoted for a POSIX shell where the id needs it.
func StopCommand(id string) string {
	return "tfgpu-kernel stop " + shellQuote(id)
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9._:@%+=,/-]+$`)

func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Unavailable is the line the supervisor adds after a GPU out-of-memory
// error when NVML cannot say who holds the memory.
func Unavailable(why string) string {
	if why = clean(why, 200); why == "" {
		return "GPU memory holders unknown: NVML unavailable\n"
	}
	return "GPU memory holders unknown: NVML unavailable: " + why + "\n"
}

// formatBytes is gpu.FormatBytes, which this package cannot import
// without linking NVML (cgo) in: bytesize.Format, and "? MiB" for a figure
// NVML did not give. format_cgo_test.go holds the two equal.
func formatBytes(n int64) string {
	if n < 0 {
		return "? MiB"
	}
	return bytesize.Format(n)
}

// idle writes d in its two largest units: "45s", "12m", "2h5m", "3d4h".
func idle(d time.Duration) string {
	s := int64(d / time.Second)
	m, h, days := s/60, s/3600, s/86400
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case m < 60:
		return fmt.Sprintf("%dm", m)
	case h < 24 && m%60 == 0:
		return fmt.Sprintf("%dh", h)
	case h < 24:
		return fmt.Sprintf("%dh%dm", h, m%60)
	case h%24 == 0:
		return fmt.Sprintf("%dd", days)
	}
	return fmt.Sprintf("%dd%dh", days, h%24)
}

// clean makes s fit on one line of plain text: control characters
// (escape sequences, line breaks), bidirectional overrides and invalid
// UTF-8 become '?', surrounding space is trimmed, and more than max runes
// are cut to max-3 and "...". A notebook's name is its user's to choose
// and another user's command line is theirs: neither may draw on this
// user's screen.
func clean(s string, max int) string {
	s = strings.TrimSpace(s)
	var b strings.Builder
	n := 0
	for i, r := range s {
		if n == max-3 && utf8.RuneCountInString(s[i:]) > 3 {
			b.WriteString("...")
			break
		}
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) ||
			r == '\u2028' || r == '\u2029' {
			r = '?'
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}
