package kernelspec

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Previous is what an installed kernelspec of ours was configured with,
// read back from its kernel.json so that an upgrade (install --replace,
// ./install.sh run again) keeps it: the Python, the run flags, the env
// given with --env and the display name (docs/design.md#install).
type Previous struct {
	Dir         string
	Binary      string      // argv[0]: the supervisor it runs
	Python      string      // the ipykernel Python; "" for a wrapper
	RunFlags    [][2]string // run flags in argv order: {"--memory-limit", "8G"}
	Env         map[string]string
	DisplayName string
	// DisplayDefault says DisplayName is the default one: ours, or for a
	// wrapper "<theirs> (clean restart)" of their spec as it is now.
	DisplayDefault bool
	Wraps          string // the wrapped kernelspec's name; "" for an ipykernel spec
	WrapsDir       string
	// Kernel is the argv after "--": what the supervisor runs, the
	// connection file argument included.
	Kernel []string
	// Launcher says dir holds the wheel's kernelspec (pip's): its run
	// flags and env are its settings file's (SettingsPath), and Binary,
	// Python and Kernel are empty.
	Launcher bool
}

// ReadPrevious reads the kernelspec in dir. It returns nil and no error
// when there is none, and an error wrapping ErrNotOurs when the directory
// holds a kernelspec tfgpu-kernel did not write. The file is data someone
// may have edited: anything that is not the shape we write is refused
// rather than guessed at.
func ReadPrevious(dir string) (*Previous, error) {
	kj := filepath.Join(dir, "kernel.json")
	data, err := os.ReadFile(kj)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: %w (it has no kernel.json)", dir, ErrNotOurs)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", kj, err)
	}
	if !isOurs(data) {
		return nil, fmt.Errorf("%s: %w (no metadata.tfgpu in kernel.json)", dir, ErrNotOurs)
	}
	var s struct {
		Argv        []string          `json:"argv"`
		DisplayName string            `json:"display_name"`
		Env         map[string]string `json:"env"`
		Metadata    struct {
			TFGPU tfgpuTag `json:"tfgpu"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", kj, err)
	}
	bad := func(why string) (*Previous, error) {
		return nil, fmt.Errorf("%s: %s; reinstall it from scratch (install --reset)", kj, why)
	}
	if IsLauncherArgv(s.Argv) {
		set, err := ReadSettings(SettingsPath(dir))
		if err != nil {
			return nil, err
		}
		p := &Previous{Dir: dir, DisplayName: s.DisplayName, DisplayDefault: true, Env: map[string]string{}, Launcher: true}
		if set != nil {
			p.RunFlags, _ = RunFlagPairs(set.RunFlags) // ReadSettings checked them
			maps.Copy(p.Env, set.Env)
		}
		return p, nil
	}
	// <binary> run [--flag value]… -f {connection_file} -- <kernel argv…>
	dd := slices.Index(s.Argv, "--")
	if len(s.Argv) < 2 || s.Argv[1] != "run" || dd < 4 || s.Argv[dd-2] != "-f" || dd+1 >= len(s.Argv) {
		return bad(fmt.Sprintf("its argv %q is not one tfgpu-kernel writes", s.Argv))
	}
	p := &Previous{Dir: dir, Binary: s.Argv[0], DisplayName: s.DisplayName, Env: map[string]string{},
		Wraps: s.Metadata.TFGPU.Wraps, WrapsDir: s.Metadata.TFGPU.WrapsDir, Kernel: slices.Clone(s.Argv[dd+1:])}
	flags := s.Argv[2 : dd-2]
	if p.RunFlags, err = RunFlagPairs(flags); err != nil {
		return bad(fmt.Sprintf("its run flags %q are not --flag value pairs", flags))
	}
	if p.Wraps == "" {
		p.Python = s.Metadata.TFGPU.Python
		if p.Python == "" {
			p.Python = p.Kernel[0]
		}
		maps.Copy(p.Env, s.Env)
		p.DisplayDefault = p.DisplayName == DefaultDisplayName
		return p, nil
	}
	// A wrapper's env is DefaultEnv, then theirs, then --env: what --env
	// gave is what differs from theirs as it is now (DefaultEnv when they
	// have none). Their spec may be gone; then all of it is kept.
	theirs := maps.Clone(DefaultEnv)
	if f, err := ReadSpec(p.WrapsDir); err == nil {
		maps.Copy(theirs, f.Env)
		p.DisplayDefault = p.DisplayName == cmp.Or(f.DisplayName, f.Name)+" (clean restart)"
	}
	for k, v := range s.Env {
		if w, ok := theirs[k]; !ok || w != v {
			p.Env[k] = v
		}
	}
	return p, nil
}

// RunFlagPairs splits run flags as install writes them into {flag, value}
// pairs: "--name value", or one word "--name=value" (a boolean is written
// so: "--spare false" would end run's flags).
func RunFlagPairs(words []string) ([][2]string, error) {
	var out [][2]string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "--") || len(w) < 3 {
			return nil, fmt.Errorf("%q is not a --flag", w)
		}
		if name, v, ok := strings.Cut(w, "="); ok {
			out = append(out, [2]string{name, v})
			continue
		}
		if i+1 >= len(words) {
			return nil, fmt.Errorf("%s has no value", w)
		}
		out = append(out, [2]string{w, words[i+1]})
		i++
	}
	return out, nil
}
