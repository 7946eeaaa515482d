package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Stat is what a tree scan needs from /proc/PID/stat (proc(5)).
type Stat struct {
	PID   int
	State byte // R S D T t Z X ...
	PPid  int
	Pgrp  int
	Start uint64   // starttime, clock ticks after boot: tells a process from a later one with the same pid
	Comm  [16]byte // the command name (at most 15 bytes, TASK_COMM_LEN), NUL-padded
}

func (s Stat) Proc() Proc {
	return Proc{PID: s.PID, State: s.State, Start: s.Start, PPid: s.PPid, Comm: string(bytes.TrimRight(s.Comm[:], "\x00"))}
}

// Alive reports whether the process can still run: a zombie (Z) or a dead
// task (X, x) has released everything but its pid and exit status.
func (s Stat) Alive() bool {
	return s.State != 'Z' && s.State != 'X' && s.State != 'x'
}

// parseStat parses one /proc/PID/stat line. comm sits in parentheses and may
// itself contain spaces and ')', so the fields start after the LAST ')'.
func parseStat(b []byte) (Stat, error) {
	var s Stat
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return s, fmt.Errorf("parse stat %q: no (comm)", truncate(b))
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return s, fmt.Errorf("parse stat pid: %w", err)
	}
	// Fields after comm: 3 state, 4 ppid, 5 pgrp, ... 22 starttime.
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return s, fmt.Errorf("parse stat of %d: %d fields after comm", pid, len(f))
	}
	s.PID, s.State = pid, f[0][0]
	copy(s.Comm[:], b[open+1:end])
	if s.PPid, err = strconv.Atoi(string(f[1])); err != nil {
		return s, fmt.Errorf("parse stat ppid of %d: %w", pid, err)
	}
	if s.Pgrp, err = strconv.Atoi(string(f[2])); err != nil {
		return s, fmt.Errorf("parse stat pgrp of %d: %w", pid, err)
	}
	if s.Start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return s, fmt.Errorf("parse stat starttime of %d: %w", pid, err)
	}
	return s, nil
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// StatReader reads /proc/PID/stat files into one reused buffer: a scan reads
// every process on the host, so it avoids an allocation per file.
type StatReader struct {
	Root string // "/proc"
	buf  []byte
}

// Read returns the stat of pid; ok is false when the process is gone.
func (r *StatReader) Read(pid int) (s Stat, ok bool, err error) {
	if r.buf == nil {
		r.buf = make([]byte, 4096) // a stat line is < 1 KiB; comm is at most 64 bytes
	}
	path := r.Root + "/" + strconv.Itoa(pid) + "/stat"
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return s, false, nil // exited and reaped since the directory was listed
		}
		return s, false, fmt.Errorf("open %s: %w", path, err)
	}
	n, err := readFull(fd, r.buf)
	unix.Close(fd)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return s, false, nil // reaped between open and read
		}
		return s, false, fmt.Errorf("read %s: %w", path, err)
	}
	s, err = parseStat(r.buf[:n])
	return s, err == nil, err
}

func readFull(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
		if m == 0 || n < len(buf) {
			// procfs produces a stat file in one read when the buffer
			// holds it: a short read is the end, no need for a read of 0.
			break
		}
	}
	return n, nil
}

// Scan reads the stat of every process in r.Root. Processes that exit while
// it runs are left out; the caller scans again.
func (r *StatReader) Scan() (map[int]Stat, error) {
	d, err := os.Open(r.Root)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", r.Root, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", r.Root, err)
	}
	procs := make(map[int]Stat, len(names))
	for _, name := range names {
		if name == "" || name[0] < '1' || name[0] > '9' {
			continue // self, sys, meminfo, ...
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		s, ok, err := r.Read(pid)
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", r.Root, err)
		}
		if ok {
			procs[pid] = s
		}
	}
	return procs, nil
}

// Proc is what /proc/PID/stat says of a process (proc(5)). This file is
// the project's one reader of /proc/PID/stat.
type Proc struct {
	PID   int
	State byte   // R S D T t Z X ...
	Start uint64 // starttime, clock ticks after boot: tells a process from a later one with the same pid
	PPid  int    // the parent's pid
	Comm  string // the command name (at most 15 bytes)
}

// Alive reports whether the process can still run (not a zombie or dead).
func (p Proc) Alive() bool { return Stat{State: p.State}.Alive() }

// Stopped reports whether the process is stopped (SIGSTOP, a debugger).
func (p Proc) Stopped() bool { return p.State == 'T' || p.State == 't' }

// Read reads /proc/PID/stat. An error wrapping os.ErrNotExist means
// there is no such process.
func Read(pid int) (Proc, error) {
	if pid <= 0 {
		return Proc{}, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	r := StatReader{Root: "/proc"}
	s, ok, err := r.Read(pid)
	switch {
	case err != nil:
		return Proc{}, err
	case !ok:
		return Proc{}, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	return s.Proc(), nil
}

// StartTime returns the start time of pid (clock ticks after boot, proc(5)
// field 22), which tells a process from a later one that reuses its pid.
func StartTime(pid int) (uint64, error) {
	p, err := Read(pid)
	return p.Start, err
}

// HasChildren reports whether pid's main thread has child processes, the
// zombies it has not reaped included (/proc/PID/task/PID/children; the
// children of its other threads are not looked at).
func HasChildren(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	return err == nil && len(bytes.TrimSpace(b)) > 0
}

// maxCmdline bounds what Cmdline reads: a command line is the
// process's own to make as long as ARG_MAX allows.
const maxCmdline = 64 << 10

// Cmdline is pid's argv (/proc/PID/cmdline), at most 64 KiB of it.
func Cmdline(pid int) ([]string, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCmdline))
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("pid %d: no command line (a kernel thread, or a zombie)", pid)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), nil
}

// Owner is pid's owner (the owner of /proc/PID: its effective uid),
// or -1 when there is no such process.
func Owner(pid int) int {
	var s unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid), &s); err != nil {
		return -1
	}
	return int(s.Uid)
}

// RSS is pid's resident memory in bytes (0 when it is gone).
func RSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return pages * int64(os.Getpagesize())
}

// userHZ is the unit of /proc's CPU times (proc(5): USER_HZ, 100 on every
// Linux architecture's ABI).
const userHZ = 100

// CPU is the CPU time pid has used, user and system (0 when it is
// gone).
func CPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0
	}
	f := bytes.Fields(b[end+1:]) // 3 state … 14 utime, 15 stime
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseUint(string(f[11]), 10, 63)
	s, err2 := strconv.ParseUint(string(f[12]), 10, 63)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * time.Second / userHZ
}

// PSS is pid's proportional set size in bytes: its resident memory,
// with each page shared among n processes counted 1/n, so that a tree of
// forked workers sums to what it really holds (/proc/PID/smaps_rollup;
// RSS when that cannot be read; 0 when it is gone).
func PSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err == nil {
		if kb, ok := meminfoField(b, "Pss:"); ok {
			return kb << 10
		}
	}
	return RSS(pid)
}

// HostMemory is the host's memory from /proc/meminfo, in bytes.
type HostMemory struct {
	Total, Available, Free, Buffers, Cached int64
}

// ReadHostMemory reads /proc/meminfo.
func ReadHostMemory() (HostMemory, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return HostMemory{}, err
	}
	var m HostMemory
	for _, f := range []struct {
		key string
		to  *int64
	}{{"MemTotal:", &m.Total}, {"MemAvailable:", &m.Available}, {"MemFree:", &m.Free}, {"Buffers:", &m.Buffers}, {"Cached:", &m.Cached}} {
		kb, _ := meminfoField(b, f.key)
		*f.to = kb << 10
	}
	if m.Total <= 0 {
		return m, errors.New("/proc/meminfo: no MemTotal")
	}
	return m, nil
}

// meminfoField finds "key   N kB" in a meminfo-shaped file.
func meminfoField(b []byte, key string) (int64, bool) {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
			f := bytes.Fields(v)
			if len(f) == 0 {
				return 0, false
			}
			n, err := strconv.ParseInt(string(f[0]), 10, 64)
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}
