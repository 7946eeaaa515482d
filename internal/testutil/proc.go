package testutil

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Pids lists the processes in /proc, in its order.
func Pids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ProcStat returns a process's state letter and parent from
// /proc/PID/stat ("pid (comm) S ppid ...": comm may hold spaces and
// parentheses); ok is false once it is gone.
func ProcStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+4 >= len(b) {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid, true
}
