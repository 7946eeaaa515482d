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

// statFields returns the fields of /proc/PID/stat after "pid (comm)"
// (comm may hold spaces and parentheses): the state letter first; nil
// once it is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// procStart returns a process's start time (field 22); "" once it is gone.
func procStart(pid int) string {
	if f := statFields(pid); len(f) > 19 {
		return f[19]
	}
	return ""
}

// ProcStat returns a process's state letter and parent; ok is false once
// it is gone.
func ProcStat(pid int) (state byte, ppid int, ok bool) {
	f := statFields(pid)
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid, true
}
