package wrapper

import (
	"os"
	"sync"
)

// fdReserve holds descriptors open from the start so that, however many a
// flood of client connections takes, the tree kill finds some free: it
// opens cgroup.kill, cgroup.events, /proc/PID files and pidfds, and failed
// with EMFILE while a local user held a kernel's ports open by the
// thousand (then a setsid'd child survived the kill). The door refuses
// connections well before RLIMIT_NOFILE (zmtp's fdReserve); this covers a
// limit lowered under a running supervisor (prlimit).
type fdReserve struct {
	once  sync.Once
	files []*os.File
}

// reserveFDs opens n descriptors on /dev/null; fewer if it cannot.
func reserveFDs(n int) *fdReserve {
	r := &fdReserve{}
	for range n {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		r.files = append(r.files, f)
	}
	return r
}

// release closes the reserve, once, right before the descriptors are
// needed.
func (r *fdReserve) release() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		for _, f := range r.files {
			f.Close()
		}
		r.files = nil
	})
}
