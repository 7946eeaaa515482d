package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/control"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/runflags"
	"github.com/tfgpu/tfgpu-kernel/kernelspec"
)

// keep fills in what was not given on the command line from the installed
// kernelspec of ours that --replace upgrades (not with --reset): the
// Python, what it wraps, its run flags, its env and its display name. It
// returns what it kept, for one line of output. A setting given now wins;
// a run flag given empty drops the kept one; a run flag and its TFGPU_
// variable are one setting, so giving either drops the other's kept
// value. Kept run flags are checked as given ones are.
func (c *installCmd) keep() (kept []string, prev *kernelspec.Previous, err error) {
	if !c.o.Replace || c.reset {
		return nil, nil, nil
	}
	dir, err := kernelspec.SpecDir(context.Background(), c.o)
	if err != nil {
		return nil, nil, err
	}
	if prev, err = kernelspec.ReadPrevious(dir); err != nil || prev == nil {
		if errors.Is(err, kernelspec.ErrNotOurs) {
			err = nil // replaced as asked; nothing of ours to keep
		}
		return nil, nil, err
	}
	o := &c.o
	switch {
	case c.set["wrap"] || c.set["python"]: // a new choice of kernel
	case prev.Wraps != "":
		o.Wrap = prev.WrapsDir
		kept = append(kept, "wraps "+prev.Wraps)
	case prev.Python != "":
		o.Python = prev.Python
		kept = append(kept, "python "+prev.Python)
	}
	if !c.set["display-name"] && !prev.DisplayDefault {
		o.DisplayName = prev.DisplayName
		kept = append(kept, fmt.Sprintf("display name %q", prev.DisplayName))
	}

	givenEnv := maps.Clone(c.env)
	for _, p := range prev.RunFlags {
		name := strings.TrimPrefix(p[0], "--")
		switch {
		case !slices.Contains(runflags.KernelspecFlags, name):
			kept = append(kept, "not "+p[0]+" (no such run flag any more)")
			continue
		case c.set[name]: // given now, perhaps empty: no value
			continue
		}
		if _, ok := givenEnv[runflags.EnvName(name)]; ok {
			continue
		}
		c.src[name] = "the installed kernelspec's " + p[0]
		if err := c.fs.Set(name, p[1]); err != nil {
			return nil, nil, fmt.Errorf("%s %q: %v; give it again with a new value, or --reset", c.src[name], p[1], err)
		}
		c.set[name] = true
		kept = append(kept, p[0]+" "+p[1])
	}
	for _, k := range slices.Sorted(maps.Keys(prev.Env)) {
		v := prev.Env[k]
		if _, ok := givenEnv[k]; ok {
			continue
		}
		if name, ok := runflags.FlagOfEnv(k); ok && c.set[name] && c.src[name] == "" {
			continue // the flag given now wins over the variable kept
		}
		c.env[k] = v
		if d, ok := kernelspec.DefaultEnv[k]; !ok || d != v {
			kept = append(kept, "--env "+k+"="+v)
		}
	}
	return kept, prev, nil
}

// checkEnv checks every TFGPU_ variable the kernelspec's env will carry as
// run will read it at each start: a variable run does not know is a typo
// that would be ignored, a bad value a kernel that never starts.
func (c *installCmd) checkEnv() error {
	for _, k := range slices.Sorted(maps.Keys(c.env)) {
		v := c.env[k]
		if !strings.HasPrefix(k, "TFGPU_") {
			continue
		}
		name, ok := runflags.FlagOfEnv(k)
		if !ok {
			return runflags.NoSuchSetting("--env " + k) // the line run says for it (internal/runflags)
		}
		if c.set[name] && c.src[name] == "" {
			return fmt.Errorf("--%s and --env %s are one setting; give one", name, k)
		}
		if name == "state-dir" {
			if !filepath.IsAbs(v) {
				return fmt.Errorf("--env %s=%q: want an absolute directory, such as /var/lib/tfgpu-kernel", k, v)
			}
			continue
		}
		if v == "" {
			continue // empty: run's default (runflags.Parse ignores an empty variable)
		}
		var rf runflags.Flags // a fresh set of run flags: only this value is checked
		one := flag.NewFlagSet("run", flag.ContinueOnError)
		one.SetOutput(io.Discard)
		rf.Define(one)
		if err := one.Set(name, v); err != nil {
			return fmt.Errorf("--env %s=%q: %v", k, v, err)
		}
		if _, err := rf.Check(runflags.Source{name: "--env " + k}); err != nil {
			return err
		}
	}
	return nil
}

// kernelsRunningOn names the kernels whose supervisor was started from
// the kernelspec prev (its binary, and its kernel's argv with any
// connection file): the user's own, or every user's for root. What is
// matched is read from the running processes, never from the records.
func kernelsRunningOn(prev *kernelspec.Previous) []string {
	var out []string
	states, _, err := control.Collect(record.DefaultDir(), os.Geteuid() == 0, false)
	if err == nil {
		for _, k := range record.Census(states, nil) {
			st := k.State
			// The process Jupyter launched from the kernelspec: the
			// supervisor, or the stub of a standby that took over.
			launched := k.Launched()
			if launched == 0 {
				continue
			}
			argv, err := cgroup.ProcCmdline(launched)
			if err != nil || !runsSpec(argv, prev) {
				continue
			}
			label := record.ShortID(st.KernelID)
			var about []string
			if st.Session != "" {
				about = append(about, record.Printable(st.Session))
			}
			if os.Geteuid() == 0 {
				about = append(about, "user "+record.UserName(st.Owner))
			}
			if len(about) > 0 {
				label += " (" + strings.Join(about, ", ") + ")"
			}
			out = append(out, label)
		}
	}
	slices.Sort(out)
	return out
}

// runsSpec says whether a supervisor's argv is prev's: the same binary,
// and after "--" the same kernel argv, any argument where the kernelspec
// has "{connection_file}".
func runsSpec(argv []string, prev *kernelspec.Previous) bool {
	dd := slices.Index(argv, "--")
	if len(argv) == 0 || argv[0] != prev.Binary || dd < 0 || len(argv)-dd-1 != len(prev.Kernel) {
		return false
	}
	for i, a := range argv[dd+1:] {
		if w := prev.Kernel[i]; w != a && w != "{connection_file}" {
			return false
		}
	}
	return true
}
