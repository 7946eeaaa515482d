package gpu

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/tfgpu/tfgpu-kernel/internal/rootfile"
)

// Soname is the library Open loads when no path is given.
const Soname = "libnvidia-ml.so.1"

// Device is one watched GPU.
type Device struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid"`
	Name   string `json:"name"`
	Total  uint64 `json:"total_bytes"`
	handle nvml.Device
}

// Holder is one process entry of NVML: a process with a context on a
// device. Bytes is -1 when NVML cannot give the figure
// (NVML_VALUE_NOT_AVAILABLE).
type Holder struct {
	Device int    `json:"index"`
	UUID   string `json:"uuid"`
	PID    int    `json:"pid"`
	Bytes  int64  `json:"bytes"`
}

// NVML is one NVML session, for the supervisor's life: nvmlInit can take
// seconds on a GPU without persistence mode, so it is done once.
type NVML struct {
	lib     nvml.Interface
	Driver  string
	devices []Device
	// Notes are what could not be checked, or how, for the log: said once.
	Notes []string
	// mig: the library has the MIG queries (migSymbols) that Units uses.
	mig bool

	mu     sync.Mutex
	closed bool
}

// symbols are the NVML functions used here, in their unversioned names
// (every driver has those; go-nvml uses a newer version where there is one).
var symbols = []string{
	"nvmlSystemGetDriverVersion", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
	"nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo",
	"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
}

// Open starts the NVML session and picks the watched devices: those
// visible names (CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES: indices or
// UUIDs, comma-separated; "" or "all": every device). path "" loads Soname.
func Open(path, visible string) (*NVML, error) {
	var opts []nvml.LibraryOption
	if path != "" {
		if err := trustedLibrary(path); err != nil {
			return nil, err
		}
		opts = append(opts, nvml.WithLibraryPath(path))
	}
	lib := nvml.New(opts...)
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		where := Soname + " (through the dynamic loader)"
		if path != "" {
			where = path
		}
		return nil, fmt.Errorf("no NVIDIA driver: cannot load %s", where)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, errors.New("no NVIDIA driver: the kernel module is not loaded")
	default:
		return nil, fmt.Errorf("NVML init failed: %s", errorString(lib, ret))
	}
	n := &NVML{lib: lib}
	ext := lib.Extensions()
	for _, s := range symbols {
		if ext.LookupSymbol(s) != nil {
			lib.Shutdown()
			return nil, fmt.Errorf("NVML library lacks %s", s)
		}
	}
	if ext.LookupSymbol("nvmlDeviceGetComputeRunningProcesses_v3") != nil {
		n.Notes = append(n.Notes, "driver without the _v3 process lists; using the older ones")
	}
	if n.mig = hasSymbols(lib, migSymbols); !n.mig {
		n.Notes = append(n.Notes, "NVML without MIG queries; MIG instances are not listed")
	}
	n.Driver, _ = lib.SystemGetDriverVersion()
	all, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("NVML device count: %s", errorString(lib, ret))
	}
	for i := range all {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			n.Notes = append(n.Notes, fmt.Sprintf("GPU%d: %s", i, errorString(lib, ret)))
			continue
		}
		d := Device{Index: i, handle: h}
		d.UUID, _ = h.GetUUID()
		d.Name, _ = h.GetName()
		if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			d.Total = mem.Total
		}
		n.devices = append(n.devices, d)
	}
	n.devices = selectVisible(n.devices, visible)
	return n, nil
}

// selectVisible keeps the devices visible names: indices or UUIDs (a UUID
// may be given without its "GPU-" prefix, or as a prefix that names one
// device only, as CUDA accepts). Unknown or ambiguous names are ignored; an
// empty result watches nothing.
func selectVisible(devs []Device, visible string) []Device {
	visible = strings.TrimSpace(visible)
	if visible == "" || visible == "all" {
		return devs
	}
	var out []Device
	for _, name := range strings.Split(visible, ",") {
		var hits []Device
		for _, d := range devs {
			if matches(d, strings.TrimSpace(name)) {
				hits = append(hits, d)
			}
		}
		if len(hits) == 1 && !slices.ContainsFunc(out, func(o Device) bool { return o.Index == hits[0].Index }) {
			out = append(out, hits[0])
		}
	}
	return out
}

func matches(d Device, name string) bool {
	if i, err := strconv.Atoi(name); err == nil {
		return i == d.Index
	}
	name = strings.TrimPrefix(name, "GPU-")
	return name != "" && strings.HasPrefix(strings.TrimPrefix(d.UUID, "GPU-"), name)
}

// Devices are the watched devices.
func (n *NVML) Devices() []Device { return n.devices }

// Holders lists the compute and graphics processes on the watched devices
// (a process with both is listed once per device).
func (n *NVML) Holders() ([]Holder, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("NVML session closed")
	}
	var out []Holder
	for _, d := range n.devices {
		seen := map[int]bool{}
		for _, list := range []func() ([]nvml.ProcessInfo, nvml.Return){
			d.handle.GetComputeRunningProcesses, d.handle.GetGraphicsRunningProcesses,
		} {
			procs, ret := list()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("GPU%d process list: %s", d.Index, errorString(n.lib, ret))
			}
			for _, p := range procs {
				if seen[int(p.Pid)] {
					continue
				}
				seen[int(p.Pid)] = true
				b := int64(p.UsedGpuMemory)
				if p.UsedGpuMemory == math.MaxUint64 || b < 0 { // NVML_VALUE_NOT_AVAILABLE
					b = -1
				}
				out = append(out, Holder{Device: d.Index, UUID: d.UUID, PID: int(p.Pid), Bytes: b})
			}
		}
	}
	return out, nil
}

// Free is the memory NVML says is free on a watched device now (it counts
// the driver's own use, which no process entry shows).
func (n *NVML) Free(d Device) (uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return 0, errors.New("NVML session closed")
	}
	mem, ret := d.handle.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("GPU%d memory: %s", d.Index, errorString(n.lib, ret))
	}
	return mem.Free, nil
}

// Persistence says per watched device whether persistence mode is on, or
// an error where NVML cannot tell.
func (n *NVML) Persistence(d Device) (bool, error) {
	if n.lib.Extensions().LookupSymbol("nvmlDeviceGetPersistenceMode") != nil {
		return false, errors.New("not in this NVML")
	}
	m, ret := d.handle.GetPersistenceMode()
	if ret != nvml.SUCCESS {
		return false, errors.New(errorString(n.lib, ret))
	}
	return m == nvml.FEATURE_ENABLED, nil
}

// Close ends the session.
func (n *NVML) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.closed {
		n.closed = true
		n.lib.Shutdown()
	}
}

func errorString(lib nvml.Interface, ret nvml.Return) string {
	if lib.Extensions().LookupSymbol("nvmlErrorString") != nil {
		return fmt.Sprintf("NVML error %d", int(ret))
	}
	return lib.ErrorString(ret)
}

// trustedLibrary refuses, for a process running as root, an NVML library
// file that someone other than root could have written or could replace:
// loading it runs its code as root. The file (links resolved) and its
// directory must belong to root and not be writable by group or others.
// Other users load what they like: it runs as them. The dynamic loader's
// own search (no path) is left to the loader's rules.
func trustedLibrary(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("NVML library %s: %w", path, err)
	}
	var nr *rootfile.NotRoots
	switch err := rootfile.Check(abs); {
	case errors.As(err, &nr):
		return fmt.Errorf("NVML library %s: refusing to load it as root: %s belongs to uid %d with mode %#o (it must be root's and writable only by root)",
			path, nr.Path, nr.UID, nr.Mode)
	case err != nil:
		return fmt.Errorf("NVML library %s: %w", path, err)
	}
	return nil
}
