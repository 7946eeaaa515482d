package kernelspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Defaults used when Options leaves a field empty.
const (
	DefaultName        = "tfgpu"
	DefaultDisplayName = "TF-GPU (clean restart)"
)

// ErrInvalid marks a bad Options value (name, binary, env key): a usage error.
var ErrInvalid = errors.New("invalid kernelspec option")

// Dest says which Jupyter data directory the kernelspec goes into.
type Dest int

const (
	User      Dest = iota // $JUPYTER_DATA_DIR or ~/.local/share/jupyter (default)
	SysPrefix             // sys.prefix of the chosen Python
	Prefix                // Options.Prefix
)

func (d Dest) String() string {
	switch d {
	case User:
		return "user"
	case SysPrefix:
		return "sys-prefix"
	case Prefix:
		return "prefix"
	}
	return fmt.Sprintf("Dest(%d)", int(d))
}

// Options describe one kernelspec.
type Options struct {
	Name        string            // directory name; default DefaultName
	DisplayName string            // default DefaultDisplayName
	Python      string            // interpreter; "" means FindPython's search
	Binary      string            // absolute path of the tfgpu-kernel binary
	Version     string            // tfgpu-kernel version, recorded in metadata.tfgpu
	Env         map[string]string // extra env; overrides the defaults
	RunFlags    []string          // extra flags placed after "run"
	Dest        Dest
	Prefix      string // with Dest == Prefix: DIR of DIR/share/jupyter/kernels
	Replace     bool   // overwrite an existing kernelspec of the same name
}

// DefaultEnv is the env every tfgpu kernelspec gets unless overridden:
// without allow-growth TensorFlow grabs nearly all GPU memory at import.
var DefaultEnv = map[string]string{"TF_FORCE_GPU_ALLOW_GROWTH": "true"}

// jupyter_client's _kernel_name_pat (kernelspec.py), applied after lower-casing.
var namePat = regexp.MustCompile(`^[a-z0-9._-]+$`)

// NormalizeName lower-cases name (jupyter_client looks kernelspecs up
// case-insensitively and installs them lower-cased) and validates it.
func NormalizeName(name string) (string, error) {
	if name == "" {
		name = DefaultName
	}
	n := strings.ToLower(name)
	if !namePat.MatchString(n) || n == "." || n == ".." {
		return "", fmt.Errorf("%w: kernel name %q: only letters, digits, '.', '_' and '-' are allowed", ErrInvalid, name)
	}
	return n, nil
}

// spec is kernel.json. Field order here is the order in the file.
type spec struct {
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode"`
	Env           map[string]string `json:"env"` // encoding/json sorts map keys
	Metadata      specMetadata      `json:"metadata"`
}

type specMetadata struct {
	Debugger bool      `json:"debugger"`
	TFGPU    *tfgpuTag `json:"tfgpu,omitempty"`
}

// tfgpuTag marks a kernelspec as ours; Uninstall only removes specs with it.
type tfgpuTag struct {
	Version   string `json:"version"`
	Python    string `json:"python"`
	IPykernel string `json:"ipykernel,omitempty"`
}

// KernelJSON renders kernel.json for o and the resolved Python py.
func KernelJSON(o Options, py Python) ([]byte, error) {
	if !filepath.IsAbs(o.Binary) {
		return nil, fmt.Errorf("%w: tfgpu-kernel binary path %q is not absolute", ErrInvalid, o.Binary)
	}
	if !filepath.IsAbs(py.Executable) {
		return nil, fmt.Errorf("%w: python path %q is not absolute", ErrInvalid, py.Executable)
	}
	env := make(map[string]string, len(DefaultEnv)+len(o.Env))
	for k, v := range DefaultEnv {
		env[k] = v
	}
	for k, v := range o.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("%w: env name %q", ErrInvalid, k)
		}
		env[k] = v
	}
	display := o.DisplayName
	if display == "" {
		display = DefaultDisplayName
	}
	version := o.Version
	if version == "" {
		version = "dev"
	}
	argv := append([]string{o.Binary, "run"}, o.RunFlags...)
	argv = append(argv, "-f", "{connection_file}", "--",
		py.Executable, "-m", "ipykernel_launcher", "-f", "{connection_file}")
	s := spec{
		Argv:          argv,
		DisplayName:   display,
		Language:      "python",
		InterruptMode: "signal",
		Env:           env,
		Metadata: specMetadata{Debugger: true, TFGPU: &tfgpuTag{
			Version: version, Python: py.Executable, IPykernel: py.IPykernel,
		}},
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep '<', '>' and '&' readable; Jupyter parses either
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("encode kernel.json: %w", err)
	}
	return b.Bytes(), nil
}

// isOurs reports whether kernel.json content carries metadata.tfgpu.
func isOurs(data []byte) bool {
	var s struct {
		Metadata struct {
			TFGPU json.RawMessage `json:"tfgpu"`
		} `json:"metadata"`
	}
	if json.Unmarshal(data, &s) != nil {
		return false
	}
	t := bytes.TrimSpace(s.Metadata.TFGPU)
	return len(t) > 0 && t[0] == '{'
}
