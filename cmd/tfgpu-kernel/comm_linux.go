package main

import (
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A standby is started through /proc/self/exe (the very binary, even once
// an upgrade replaced the file), and the kernel names a process after the
// file it executes: "exe". ps, top, and root's discovery of the kernels
// (internal/record: every process of a kernel that is this program is
// named as the program) know it by the program's name, which it takes
// here. Package initialization runs on the main thread, whose name is the
// process's (/proc/PID/comm).
func init() {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil || strings.TrimSpace(string(b)) != "exe" || len(os.Args) == 0 {
		return
	}
	name := filepath.Base(os.Args[0])
	if len(name) > 15 { // TASK_COMM_LEN - 1
		name = name[:15]
	}
	if p, err := unix.BytePtrFromString(name); err == nil {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
	}
}
