package record

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Root's discovery opens a state directory through a holder's
// /proc/PID/fd/N. The first holder in pid order may be a user's ps or
// doctor that ended since the scan, or closed the directory and opened a
// file with its descriptor (found by TestKernelIdentityAcrossStates after
// the pids wrapped: the owner's doctor said "!! kernel record: no such
// file or directory", then "not a directory", and skipped the directory):
// the directory is opened through the next holder, and when none holds
// it any more it is left without a refusal.
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
	gone := exec.Command("/bin/true") // a holder that ended
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	ended := fmt.Sprintf("/proc/%d/fd/0", gone.Process.Pid)
	reused, closeReused := link()
	closeReused() // one that closed it and opened a file
	f, err := os.Open("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()) != reused {
		t.Fatalf("the file did not take the closed descriptor %s", reused)
	}
	h := &heldDir{key: dirKey{uint64(st.Dev), st.Ino}, uid: os.Geteuid(), path: dir, links: []string{ended, reused, holding}}
	d, err := h.open()
	if err != nil {
		t.Fatalf("open through %v: %v", h.links, err)
	}
	d.Close()
	h.links = h.links[:2]
	if _, err := h.open(); !errors.Is(err, errHoldersGone) {
		t.Fatalf("open through %v, which hold nothing: %v, want errHoldersGone", h.links, err)
	}
}
