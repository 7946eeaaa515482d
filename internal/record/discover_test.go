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
// doctor that ended since the scan, or closed the directory and reused
// the descriptor for a file or another directory (found by
// TestKernelIdentityAcrossStates after the pids wrapped: the owner's
// doctor said "!! kernel record: no such file or directory", "not a
// directory", "/proc/N/fd changed while it was read", and skipped the
// directory): the directory is opened through the next holder, and when
// none holds it any more it is left without a refusal.
func TestHeldDirOpensThroughAHolderThatStillHoldsIt(t *testing.T) {
	dir, other := testutil.PrivateDir(t), testutil.PrivateDir(t)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	link := func(path string) (string, *os.File) {
		f, err := os.Open(path)
		testutil.NoErr(t, err)
		t.Cleanup(func() { f.Close() })
		return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()), f
	}
	holding, _ := link(dir)
	gone := exec.Command("/bin/true") // a holder that ended
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	ended := fmt.Sprintf("/proc/%d/fd/0", gone.Process.Pid)
	file, _ := link("/proc/self/stat") // one whose descriptor is a file now
	another, _ := link(other)          // and one whose is another directory
	h := &heldDir{key: dirKey{uint64(st.Dev), st.Ino}, uid: os.Geteuid(), path: dir, links: []string{ended, file, another, holding}}
	d, err := h.open()
	if err != nil {
		t.Fatalf("open through %v: %v", h.links, err)
	}
	d.Close()
	h.links = h.links[:3]
	if _, err := h.open(); !errors.Is(err, errHoldersGone) {
		t.Fatalf("open through %v, which hold nothing: %v, want errHoldersGone", h.links, err)
	}

	// Nor is a /proc/PID/fd this process reads taken for a state
	// directory: it is the process's own, and 0500.
	procFD, _ := link(fmt.Sprintf("/proc/%d/fd", os.Getpid()))
	for _, fd := range dirFDs(os.Getpid(), os.Geteuid()) {
		if fd.link == procFD {
			t.Errorf("dirFDs takes %s (%s) for a state directory", fd.link, fd.path)
		}
	}
}
