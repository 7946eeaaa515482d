package kernelspec

import (
	"fmt"
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
