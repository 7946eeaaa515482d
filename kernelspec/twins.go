package kernelspec

import (
	"context"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Twins are the kernelspecs of ours other than the one in dir
// that run bin, in the directories Jupyter searches as the removed
// kernelspec's Python (its sys.prefix: a --sys-prefix twin) and the
// default ones see them, and in dir's own kernels directory; only those
// this user may remove: a user uninstalling their own kernelspec of the
// system's binary is not told of root's, which --with-wraps could not
// remove and which keep their binary.
func Twins(ctx context.Context, bin, dir string, prev *Previous) []Spec {
	var pythons []string
	if prev != nil && prev.Python != "" {
		pythons = append(pythons, prev.Python)
	}
	for _, p := range Candidates() {
		if !slices.Contains(pythons, p) {
			pythons = append(pythons, p)
		}
	}
	self, _ := os.Stat(dir)
	var out []Spec
	for _, sp := range RunsBinary(ctx, bin, pythons, filepath.Dir(dir)) {
		if fi, err := os.Stat(sp.Dir); sp.Dir == dir || err == nil && self != nil && os.SameFile(fi, self) {
			continue
		}
		if unix.Access(filepath.Dir(sp.Dir), unix.W_OK) != nil {
			continue
		}
		out = append(out, sp)
	}
	return out
}
