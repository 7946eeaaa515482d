package kernelspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// The wheel's kernelspec (docs/design.md#wheel). A wheel cannot know where
// pip will put the binary or which Python runs Jupyter, so its kernel.json
// names neither: argv[0] is the bare "python" that jupyter_client (and VS
// Code) replace with the Python that runs the server, as ipykernel's own
// "Python 3" spec does, and the package's launcher (python/tfgpu_kernel)
// finds the binary pip installed with it and execs it with that Python as
// the kernel's.

// LauncherModule is what the wheel's kernel.json runs with "python -m".
const LauncherModule = "tfgpu_kernel"

// LauncherArgv is the wheel's kernel.json argv.
var LauncherArgv = []string{"python", "-m", LauncherModule, "-f", "{connection_file}"}

// IsLauncherArgv reports whether argv is the wheel's launcher, with
// anything between "-m tfgpu_kernel" and "-f" taken as run flags.
func IsLauncherArgv(argv []string) bool {
	return len(argv) >= 5 && slices.Equal(argv[:3], LauncherArgv[:3]) &&
		slices.Equal(argv[len(argv)-2:], LauncherArgv[3:])
}

// LauncherJSON renders the wheel's kernel.json for the build version.
func LauncherJSON(version string) ([]byte, error) {
	env, err := mergeEnv(DefaultEnv, nil)
	if err != nil {
		return nil, err
	}
	return encodeSpec(spec{
		Argv:          slices.Clone(LauncherArgv),
		DisplayName:   DefaultDisplayName,
		Language:      "python",
		InterruptMode: "signal",
		Env:           env,
		Metadata: map[string]any{"debugger": true, "supported_encryption": SupportedEncryption,
			"tfgpu": &tfgpuTag{Version: version}},
	})
}

// WriteLauncherSpec writes the wheel's kernelspec (kernel.json and the
// logos) into dir, which must not exist yet: the wheel build's staging
// directory for share/jupyter/kernels/tfgpu.
func WriteLauncherSpec(dir, version string) error {
	data, err := LauncherJSON(version)
	if err != nil {
		return err
	}
	files, err := ourLogos()
	if err != nil {
		return err
	}
	files["kernel.json"] = specFile{data: data, mode: 0o644}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("wheel kernelspec: %w", err)
	}
	return populate(dir, files)
}

// The wheel's kernelspec belongs to pip: an upgrade rewrites its
// kernel.json and an uninstall removes it. What an admin configures for it
// (run flags, env) lives in a Jupyter config file of the same prefix,
// PREFIX/etc/jupyter/tfgpu-kernel.json, which pip never touches: the
// launcher passes it to `run --settings`, and `install` writes it when its
// destination holds the wheel's kernelspec (docs/design.md#the-wheel).

// SettingsName is the settings file's name in PREFIX/etc/jupyter.
const SettingsName = "tfgpu-kernel.json"

// maxSettings bounds the settings file read back.
const maxSettings = 64 << 10

// Settings are what a settings file holds: run flags as argv words
// ("--memory-limit", "8G", …) and the kernel's extra environment.
type Settings struct {
	RunFlags []string          `json:"run_flags"`
	Env      map[string]string `json:"env"`
}

// SettingsPath is the settings file of the kernelspec in dir
// (PREFIX/share/jupyter/kernels/NAME): PREFIX/etc/jupyter/tfgpu-kernel.json.
func SettingsPath(dir string) string {
	prefix := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(dir))))
	return filepath.Join(prefix, "etc", "jupyter", SettingsName)
}

// IsLauncherSpec reports whether dir holds the wheel's kernelspec.
func IsLauncherSpec(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil || !isOurs(data) {
		return false
	}
	var s struct {
		Argv []string `json:"argv"`
	}
	return json.Unmarshal(data, &s) == nil && IsLauncherArgv(s.Argv)
}

// ReadSettings reads a settings file: nil and no error when there is none.
// It is refused whole if it is not the shape WriteSettings writes: run
// flags as --name value pairs, env names without '=' or NUL.
func ReadSettings(path string) (*Settings, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSettings+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxSettings {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxSettings)
	}
	var s Settings
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if _, err := RunFlagPairs(s.RunFlags); err != nil {
		return nil, fmt.Errorf("%s: run_flags %q are not --flag value pairs", path, s.RunFlags)
	}
	if _, err := mergeEnv(nil, s.Env); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &s, nil
}

// WriteSettings replaces the settings file at path (0644, its directories
// made 0755): written beside it and renamed over it. Empty settings remove
// it.
func WriteSettings(path string, s Settings) error {
	if len(s.RunFlags) == 0 && len(s.Env) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if s.Env == nil {
		s.Env = map[string]string{}
	}
	if s.RunFlags == nil {
		s.RunFlags = []string{}
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := mkdirAll(filepath.Dir(path)); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+SettingsName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
