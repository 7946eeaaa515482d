package kernelspec

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// An Upgrade is what an install command line gave, for Keep to fill in
// from the installed kernelspec: the run flags' rules are run's
// (internal/runflags), given here, which imports this package.
type Upgrade struct {
	Set map[string]bool   // the flags given on the command line; a run flag kept is added
	Src map[string]string // for a run flag kept, where its value came from
	Env map[string]string // --env as given; the variables kept are added
	// RunFlags are the run flags a kernelspec may carry, EnvName the
	// TFGPU_ variable of each, Flags the command line's (a kept run flag
	// is set there, checked as a given one), and Check checks the run
	// flags and Env as run would.
	RunFlags []string
	EnvName  func(flag string) string
	Flags    *flag.FlagSet
	Check    func() error
}

// Keep fills in o, and u, with what was not given on the command line
// from the installed kernelspec of ours that o.Replace upgrades: the
// Python, what it wraps, its run flags, its env and its display name. It
// returns what it kept, for one line of output, and the kernelspec
// replaced (nil when none of ours). A setting given now wins; a run flag
// given empty drops the kept one; a run flag and its TFGPU_ variable are
// one setting, so giving either drops the other's kept value. Kept run
// flags are set in u.Flags, to be checked as given ones are.
func Keep(ctx context.Context, o *Options, u Upgrade) (kept []string, prev *Previous, err error) {
	dir, err := SpecDir(ctx, *o)
	if err != nil {
		return nil, nil, err
	}
	if prev, err = ReadPrevious(dir); err != nil || prev == nil {
		if errors.Is(err, ErrNotOurs) {
			err = nil // replaced as asked; nothing of ours to keep
		}
		return nil, nil, err
	}
	switch {
	case u.Set["wrap"] || u.Set["python"]: // a new choice of kernel
	case prev.Wraps != "":
		o.Wrap = prev.WrapsDir
		kept = append(kept, "wraps "+prev.Wraps)
	case prev.Python != "":
		o.Python = prev.Python
		kept = append(kept, "python "+prev.Python)
	}
	if !u.Set["display-name"] && !prev.DisplayDefault {
		o.DisplayName = prev.DisplayName
		kept = append(kept, fmt.Sprintf("display name %q", prev.DisplayName))
	}

	givenEnv := maps.Clone(u.Env)
	for _, p := range prev.RunFlags {
		name := strings.TrimPrefix(p[0], "--")
		switch {
		case !slices.Contains(u.RunFlags, name):
			kept = append(kept, "not "+p[0]+" (no such run flag any more)")
			continue
		case u.Set[name]: // given now, perhaps empty: no value
			continue
		}
		if _, ok := givenEnv[u.EnvName(name)]; ok {
			continue
		}
		u.Src[name] = "the installed kernelspec's " + p[0]
		if err := u.Flags.Set(name, p[1]); err != nil {
			return nil, nil, fmt.Errorf("%s %q: %v; give it again with a new value, or --reset", u.Src[name], p[1], err)
		}
		u.Set[name] = true
		kept = append(kept, p[0]+" "+p[1])
	}
	for _, k := range slices.Sorted(maps.Keys(prev.Env)) {
		v := prev.Env[k]
		if _, ok := givenEnv[k]; ok {
			continue
		}
		if name, ok := flagOfEnv(u, k); ok && u.Set[name] && u.Src[name] == "" {
			continue // the flag given now wins over the variable kept
		}
		u.Env[k] = v
		if d, ok := DefaultEnv[k]; !ok || d != v {
			kept = append(kept, "--env "+k+"="+v)
		}
	}
	return kept, prev, nil
}

// flagOfEnv is the run flag of u's whose TFGPU_ variable k is.
func flagOfEnv(u Upgrade, k string) (string, bool) {
	for _, name := range u.RunFlags {
		if u.EnvName(name) == k {
			return name, true
		}
	}
	return "", false
}

// Runs says whether a supervisor's argv is p's: the same binary,
// and after "--" the same kernel argv, any argument where the kernelspec
// has "{connection_file}".
func (p *Previous) Runs(argv []string) bool {
	dd := slices.Index(argv, "--")
	if len(argv) == 0 || argv[0] != p.Binary || dd < 0 || len(argv)-dd-1 != len(p.Kernel) {
		return false
	}
	for i, a := range argv[dd+1:] {
		if w := p.Kernel[i]; w != a && w != "{connection_file}" {
			return false
		}
	}
	return true
}
