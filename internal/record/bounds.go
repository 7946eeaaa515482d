package record

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// What a user can put in root's output is bounded (docs/security.md#threats,
// class 10): every string a record carries that ps, stop, doctor and the
// metrics show is cut, visibly, to a documented size when the record is
// read back (bound), and every line of user text they print goes through
// Printable, which cuts at MaxText. A 120 KiB notebook name added ~720 KB
// per kernel to root's Prometheus text before (#33).
const (
	// MaxText bounds any one piece of user text root prints (Printable).
	MaxText = 1024
	// MaxName bounds a notebook's name (JPY_SESSION_NAME), the who, why
	// and message of a stop, and the like, in a record read back.
	MaxName = 256
	// maxWord bounds a record's short words (phase, containment, a Slurm
	// job or step id).
	maxWord = 64
	// maxPath bounds a path a record names (PATH_MAX): a longer one names
	// nothing a supervisor made, and the record is refused.
	maxPath = 4096
	// maxTree bounds the proc-mode tree a record names (pids with start
	// times) for its watcher: a tree larger than that is not a kernel's.
	maxTree = 1 << 15
)

// Cut is s with control and format characters replaced (Printable) and,
// when longer than max bytes, cut at a character boundary with a visible
// mark of how much was left out.
func Cut(s string, max int) string {
	return cut(printable(s), max)
}

func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	// The mark says how many bytes were left out; the count is made for
	// the longest mark (fewest bytes kept), so the cut never passes max.
	n := max - len("…(+"+strconv.Itoa(len(s))+" bytes)")
	if n < 0 {
		n = 0
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…(+" + strconv.Itoa(len(s)-n) + " bytes)"
}

// bound cuts the display strings of a record read back to their sizes,
// and refuses one whose paths or tree are larger than any a supervisor
// writes.
func (st *State) bound() error {
	for _, p := range []string{st.Cgroup, st.MemoryCgroup, st.InnerDir, st.ConnectionFile} {
		if len(p) > maxPath {
			return fmt.Errorf("a path of %d bytes, over %d", len(p), maxPath)
		}
	}
	if len(st.Tree) > maxTree {
		return fmt.Errorf("a tree of %d processes, over %d", len(st.Tree), maxTree)
	}
	st.Session = Cut(st.Session, MaxName)
	st.Phase, st.Containment = Cut(st.Phase, maxWord), Cut(st.Containment, maxWord)
	if p := st.Parked; p != nil {
		p.By, p.Why, p.Message = Cut(p.By, MaxName), Cut(p.Why, MaxName), Cut(p.Message, MaxName)
		p.Released, p.Held = Cut(p.Released, MaxName), Cut(p.Held, MaxText)
	}
	if j := st.Slurm; j != nil {
		j.Job, j.Step = Cut(j.Job, maxWord), Cut(j.Step, maxWord)
		if len(j.Cgroups) > 8 {
			j.Cgroups = j.Cgroups[:8]
		}
	}
	return nil
}
