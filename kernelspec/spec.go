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
	System                // SystemDataDir: every user's (root only)
)

func (d Dest) String() string {
	switch d {
	case User:
		return "user"
	case SysPrefix:
		return "sys-prefix"
	case Prefix:
		return "prefix"
	case System:
		return "system"
	}
	return fmt.Sprintf("Dest(%d)", int(d))
}

// Options describe one kernelspec.
type Options struct {
	Name        string            // directory name; default DefaultName, with Wrap WrapName(Wrap)
	DisplayName string            // default DefaultDisplayName, with Wrap "<theirs> (clean restart)"
	Python      string            // interpreter; "" means FindPython's search (with Wrap: the one whose jupyter_client finds it)
	Wrap        string            // existing kernelspec to wrap: a name Jupyter lists, or a directory with kernel.json
	Binary      string            // absolute path of the tfgpu-kernel binary
	Version     string            // tfgpu-kernel version, recorded in metadata.tfgpu
	Env         map[string]string // extra env; overrides the defaults
	RunFlags    []string          // extra flags placed after "run"
	Dest        Dest
	Prefix      string // with Dest == Prefix: DIR of DIR/share/jupyter/kernels
	Replace     bool   // overwrite an existing kernelspec of the same name
}

// DefaultEnv is the env every tfgpu kernelspec gets unless overridden,
// so that kernels share a GPU (docs/operating.md#sharing-a-gpu): without
// allow-growth TensorFlow takes nearly all of a GPU's memory at its first
// GPU operation, and JAX 75 % of it at its first; each then takes what it
// needs, as it needs it.
var DefaultEnv = map[string]string{"TF_FORCE_GPU_ALLOW_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}

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
	// KernelProtocolVersion is what the kernel inside declares (ipykernel's
	// own spec, or the wrapped one): the relay passes kernel_info_reply
	// and iopub through unchanged, so the protocol is the kernel's.
	KernelProtocolVersion string `json:"kernel_protocol_version,omitempty"`
	// Metadata is "debugger", "supported_encryption", "tfgpu" (a
	// *tfgpuTag) and, for a wrapped
	// spec, the wrapped spec's other keys as they were (json.RawMessage).
	Metadata map[string]any `json:"metadata"`
}

// SupportedEncryption is what every kernelspec of ours declares in
// metadata.supported_encryption: the supervisor's outer sockets speak
// CurveZMQ when jupyter_client (>= 8.9, transport_encryption auto or
// required) writes keys into the connection file, whatever the kernel
// inside can do (its sockets are the supervisor's private ones).
var SupportedEncryption = []string{"curve"}

// tfgpuTag marks a kernelspec as ours; Uninstall only removes specs with it.
type tfgpuTag struct {
	Version   string `json:"version"`
	Python    string `json:"python,omitempty"` // the ipykernel Python in argv; "" for a wrapped spec
	IPykernel string `json:"ipykernel,omitempty"`
	Wraps     string `json:"wraps,omitempty"`     // name of the wrapped kernelspec
	WrapsDir  string `json:"wraps_dir,omitempty"` // its directory when it was wrapped
}

// KernelJSON renders kernel.json for o and the resolved Python py.
func KernelJSON(o Options, py Python) ([]byte, error) {
	if !filepath.IsAbs(py.Executable) {
		return nil, fmt.Errorf("%w: python path %q is not absolute", ErrInvalid, py.Executable)
	}
	kernel := append(append([]string{py.Executable}, py.Args...), "-m", "ipykernel_launcher", "-f", "{connection_file}")
	argv, err := runArgv(o, kernel)
	if err != nil {
		return nil, err
	}
	env, err := mergeEnv(DefaultEnv, o.Env)
	if err != nil {
		return nil, err
	}
	display := o.DisplayName
	if display == "" {
		display = DefaultDisplayName
	}
	return encodeSpec(spec{
		Argv:                  argv,
		DisplayName:           display,
		Language:              "python",
		InterruptMode:         "signal",
		Env:                   env,
		KernelProtocolVersion: py.Protocol,
		Metadata: map[string]any{"debugger": true, "supported_encryption": SupportedEncryption, "tfgpu": &tfgpuTag{
			Version: version(o), Python: py.Executable, IPykernel: py.IPykernel,
		}},
	})
}

// runArgv is the supervisor's command line around the kernel's argv.
func runArgv(o Options, kernel []string) ([]string, error) {
	if !filepath.IsAbs(o.Binary) {
		return nil, fmt.Errorf("%w: tfgpu-kernel binary path %q is not absolute", ErrInvalid, o.Binary)
	}
	argv := append([]string{o.Binary, "run"}, o.RunFlags...)
	argv = append(argv, "-f", "{connection_file}", "--")
	return append(argv, kernel...), nil
}

// mergeEnv returns base overridden by the user's extra env, whose names
// are checked (base comes from a spec Jupyter already accepted, or DefaultEnv).
func mergeEnv(base, extra map[string]string) (map[string]string, error) {
	env := make(map[string]string, len(base)+len(extra))
	for k, v := range base {
		env[k] = v
	}
	for k, v := range extra {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("%w: env name %q", ErrInvalid, k)
		}
		env[k] = v
	}
	return env, nil
}

func version(o Options) string {
	if o.Version == "" {
		return "dev"
	}
	return o.Version
}

func encodeSpec(s spec) ([]byte, error) {
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
