package control

import (
	"os"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/kernelspec"
)

// RunningOn names the kernels whose supervisor was started from the
// kernelspec prev (its binary, and its kernel's argv with any connection
// file; kernelspec.Previous.Runs): the user's own, or every user's for
// root, as SHORTID (NOTEBOOK, user NAME). What is matched is read from
// the running processes, never from the records.
func RunningOn(prev *kernelspec.Previous) []string {
	var out []string
	states, _, err := Collect(record.DefaultDir(), os.Geteuid() == 0, false)
	if err == nil {
		for _, k := range record.Census(states, nil) {
			st := k.State
			// The process Jupyter launched from the kernelspec: the
			// supervisor, or the stub of a standby that took over.
			launched := k.Launched()
			if launched == 0 {
				continue
			}
			argv, err := proc.Cmdline(launched)
			if err != nil || !prev.Runs(argv) {
				continue
			}
			label := record.ShortID(st.KernelID)
			var about []string
			if st.Session != "" {
				about = append(about, record.Printable(st.Session))
			}
			if os.Geteuid() == 0 {
				about = append(about, "user "+record.UserName(st.Owner))
			}
			if len(about) > 0 {
				label += " (" + strings.Join(about, ", ") + ")"
			}
			out = append(out, label)
		}
	}
	slices.Sort(out)
	return out
}
