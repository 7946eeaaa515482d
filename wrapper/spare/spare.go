// Package spare keeps a spare kernel: a Python started from the
// kernelspec's interpreter and flags that has imported ipykernel (and a
// preload list) and waits, before any kernel app is initialized, so that a
// restart pays for none of those imports (issue 25, docs/design.md#spare-kernel).
//
// This package is the spare itself: which kernelspec argvs it can stand in
// for (Parse), starting one through the caller's spawn function (so that
// the caller's containment and reaper apply), handing it the kernel's argv
// (Go), and discarding it. A spare whose sys.path directories changed since
// it imported (a pip install in the notebook, then Restart) refuses to go
// (ErrStale), and the caller starts the kernel cold. Which supervisor keeps
// the spare and how the next one adopts it is the wrapper's.
//
// What ps shows (issue 32): a waiting spare's command line is a title naming
// its kernel, "/usr/bin/python3 (tfgpu-kernel spare for kernel 5b2c1e7a)",
// not the program it runs; once it is the kernel, the kernel's argv as a cold
// start runs it, "/usr/bin/python3 -m ipykernel_launcher -f ...", so that
// pgrep -f ipykernel_launcher finds it. The spare writes its own argument
// area (spare.py's _retitle), best effort: where it cannot, ps shows
// python -c and the program.
package spare

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

//go:embed spare.py
var program string

// Launch is a kernelspec argv in the shape a spare can stand in for:
// Python [interpreter options] -m ipykernel_launcher ARGS (what ipykernel's
// own kernelspec and `tfgpu-kernel install` write).
type Launch struct {
	Python string   // the interpreter, as the kernelspec names it
	Flags  []string // its options before -m (-Xfrozen_modules=off, -E, -s, ...)
	Args   []string // after -m ipykernel_launcher: -f {connection_file} ...
}

// Parse reports whether argv runs ipykernel_launcher with Python in that
// shape; options that take a value (other than -X and -W) or a -c, a
// script, or another module mean no.
func Parse(argv []string) (Launch, bool) {
	if len(argv) < 3 || !strings.Contains(baseName(argv[0]), "python") {
		return Launch{}, false
	}
	l := Launch{Python: argv[0]}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-m":
			if i+1 >= len(argv) || argv[i+1] != "ipykernel_launcher" {
				return Launch{}, false
			}
			l.Args = append([]string{}, argv[i+2:]...)
			return l, true
		case a == "-X" || a == "-W":
			if i+1 >= len(argv) {
				return Launch{}, false
			}
			l.Flags = append(l.Flags, a, argv[i+1])
			i++
		case strings.HasPrefix(a, "-X") || strings.HasPrefix(a, "-W") || flagOnly(a):
			l.Flags = append(l.Flags, a)
		default:
			return Launch{}, false
		}
	}
	return Launch{}, false
}

// flagOnly: interpreter options without a value that leave the kernel as
// it would be (-E ignores PYTHON* variables, -s the user site, -I both,
// -B no .pyc, -u unbuffered, -O/-OO asserts, -b/-bb bytes warnings, -q).
func flagOnly(a string) bool {
	switch a {
	case "-E", "-s", "-I", "-B", "-u", "-O", "-OO", "-b", "-bb", "-q", "-P":
		return true
	}
	return false
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// StartFunc starts a process as syscall.ForkExec does and returns its pid
// and a channel that receives its exit status (proc.Reaper.StartProcess,
// in the supervisor).
type StartFunc func(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan struct{}, error)

// Spare is a started spare.
type Spare struct {
	launch Launch // what it stands in for: its title once it is the kernel
	pid    int
	exited <-chan struct{}
	in     *os.File      // its fd 3
	out    *bufio.Reader // its fd 4
	outF   *os.File
	// Modules is how many modules it imported; Path the mtimes of the
	// directories on its sys.path when it had (nil: could not stat).
	Modules int
	Path    map[string]*int64
}

// ErrStale is returned (wrapped) by Go when a directory on the spare's
// sys.path changed since it imported: it would run the old packages.
var ErrStale = errors.New("the spare is stale")

// Start starts a spare for l with env and the caller's attr (its Files
// give stdin, stdout and stderr; Sys its containment), and waits until it
// has imported (ready) or ctx ends; preload is the list of modules it
// imports besides ipykernel. kernel names the kernel in its title while it
// waits (the short id the logs use).
func Start(ctx context.Context, l Launch, kernel string, env []string, preload []string, attr syscall.ProcAttr, start StartFunc) (*Spare, error) {
	inR, toSpare, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, fromSpare, err := pipe()
	if err != nil {
		toSpare.Close()
		inR.Close()
		return nil, err
	}
	defer inR.Close()
	defer fromSpare.Close()
	if len(attr.Files) < 3 {
		return nil, fmt.Errorf("start spare: want stdin, stdout and stderr in attr.Files")
	}
	attr.Files = append(append([]uintptr{}, attr.Files[:3]...), inR.Fd(), fromSpare.Fd())
	attr.Env = append(withoutPreload(env), "TFGPU_SPARE_PRELOAD="+strings.Join(preload, ","))
	// After the program, its arguments (sys.argv[1:]): its title.
	argv := append(append([]string{l.Python}, l.Flags...), "-c", program, l.Python, waitingTitle(kernel))
	pid, exited, err := start(l.Python, argv, &attr)
	if err != nil {
		toSpare.Close()
		outR.Close()
		return nil, fmt.Errorf("start spare %s: %w", l.Python, err)
	}
	s := &Spare{launch: l, pid: pid, exited: exited, in: toSpare, out: bufio.NewReader(outR), outF: outR}
	word, rest, err := s.line(ctx)
	if err == nil && word != "ready" {
		err = fmt.Errorf("said %q", word)
	}
	if err == nil {
		var r struct {
			Modules int               `json:"modules"`
			Path    map[string]*int64 `json:"path"`
		}
		if err = json.Unmarshal([]byte(rest), &r); err == nil {
			s.Modules, s.Path = r.Modules, r.Path
		}
	}
	if err != nil {
		s.Discard()
		return nil, fmt.Errorf("start spare %s: %w", l.Python, err)
	}
	return s, nil
}

func waitingTitle(kernel string) string {
	if kernel == "" {
		return "(tfgpu-kernel spare)"
	}
	return "(tfgpu-kernel spare for kernel " + kernel + ")"
}

// Pid is the spare's process id.
func (s *Spare) Pid() int { return s.pid }

// Go hands the spare the kernel's argv (as sys.argv under -m: the first
// element names the launcher), working directory and the environment
// variables chosen at adoption (env: NAME=VALUE, such as the
// CUDA_VISIBLE_DEVICES --gpus auto chose; set before any kernel code runs,
// so before CUDA reads them); from "going" on it is the kernel, and its
// command line reads as the cold-started kernel's: Python, its flags, -m,
// then argv. A stale spare exits instead (ErrStale, naming what changed);
// the caller then starts the kernel cold.
func (s *Spare) Go(ctx context.Context, argv []string, cwd string, env []string) error {
	title := append(append(append([]string{s.launch.Python}, s.launch.Flags...), "-m"), argv...)
	vars := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("spare %d: environment entry %q is not NAME=VALUE", s.pid, kv)
		}
		vars[k] = v
	}
	b, err := json.Marshal(map[string]any{"argv": argv, "cwd": cwd, "title": title, "env": vars})
	if err != nil {
		return err
	}
	if _, err := s.in.Write(append(append([]byte("go "), b...), '\n')); err != nil {
		return fmt.Errorf("spare %d: %w", s.pid, err)
	}
	s.in.Close()
	word, rest, err := s.line(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("spare %d: %w", s.pid, err)
	case word == "stale":
		return fmt.Errorf("%w: changed since it imported: %s", ErrStale, rest)
	case word != "going":
		return fmt.Errorf("spare %d said %q", s.pid, word)
	}
	s.outF.Close()
	return nil
}

// line reads one line from the spare, until ctx ends or it exits.
func (s *Spare) line(ctx context.Context) (word, rest string, err error) {
	type got struct {
		l   string
		err error
	}
	c := make(chan got, 1)
	go func() {
		l, err := s.out.ReadString('\n')
		c <- got{l, err}
	}()
	select {
	case g := <-c:
		if g.err != nil {
			return "", "", fmt.Errorf("ended before answering (%v)", g.err)
		}
		word, rest, _ = strings.Cut(strings.TrimSuffix(g.l, "\n"), " ")
		return word, rest, nil
	case <-ctx.Done():
		return "", "", fmt.Errorf("no answer: %w", ctx.Err())
	}
}

// Discard ends a spare that was not handed a kernel: its input closes,
// on which it exits by itself; SIGKILL after 200 ms. It returns once the
// spare has exited (the caller's reaper said so), or after a second.
func (s *Spare) Discard() {
	s.in.Close()
	select {
	case <-s.exited:
	case <-time.After(200 * time.Millisecond):
		unix.Kill(s.pid, unix.SIGKILL)
		select {
		case <-s.exited:
		case <-time.After(time.Second):
		}
	}
	s.outF.Close()
}

func pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("start spare: %w", err)
	}
	return r, w, nil
}

func withoutPreload(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TFGPU_SPARE_PRELOAD=") {
			out = append(out, kv)
		}
	}
	return out
}
