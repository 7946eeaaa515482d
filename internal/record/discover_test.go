package record

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Root's discovery opens a state directory through a holder's
// /proc/PID/fd/N. The first holder in pid order may be a user's ps or
// doctor that ended since the scan (found by TestKernelIdentityAcrossStates
// after the pids wrapped: the owner's doctor said "!! kernel record: no
// such file or directory", and the directory was skipped): the directory
// is opened through the next holder, and when none holds it any more it
// is left without a refusal.
func TestHeldDirOpensThroughAHolderThatStillHoldsIt(t *testing.T) {
	dir := testutil.PrivateDir(t)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	link := func() (string, func()) {
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()), func() { f.Close() }
	}
	holding, closeHolding := link()
	defer closeHolding()
	ended, end := link()
	end() // the first holder closed it, as an exited process has
	h := &heldDir{key: dirKey{uint64(st.Dev), st.Ino}, uid: os.Geteuid(), path: dir, links: []string{ended, holding}}
	d, err := h.open()
	if err != nil {
		t.Fatalf("open through %v: %v", h.links, err)
	}
	d.Close()
	h.links = h.links[:1]
	if _, err := h.open(); !errors.Is(err, errHoldersGone) {
		t.Fatalf("open through %s, which holds nothing: %v, want errHoldersGone", ended, err)
	}
}
