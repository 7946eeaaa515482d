package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Unit is what CUDA_VISIBLE_DEVICES can name: a whole GPU, or one MIG
// instance of a GPU in MIG mode.
type Unit struct {
	Device int    `json:"index"`         // the physical GPU's NVML index
	MIG    int    `json:"mig,omitempty"` // 0: the whole GPU; else the MIG device's index on it + 1
	UUID   string `json:"uuid"`          // "GPU-…" or "MIG-…", as CUDA_VISIBLE_DEVICES takes it
	Name   string `json:"name"`
	Total  uint64 `json:"total_bytes"`
	Free   uint64 `json:"free_bytes"`
}

// migSymbols are the NVML functions Units needs to list MIG instances. A
// library without them (a driver before MIG) is asked about whole GPUs only:
// go-nvml would crash calling a symbol the library lacks.
var migSymbols = []string{
	"nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
}

// hasSymbols reports whether lib exports every one of names.
func hasSymbols(lib nvml.Interface, names []string) bool {
	ext := lib.Extensions()
	for _, s := range names {
		if ext.LookupSymbol(s) != nil {
			return false
		}
	}
	return true
}

// Units lists what the watched devices offer a kernel, with the memory NVML
// says is free on each now: a GPU in MIG mode gives one Unit per existing
// MIG device (none when it has no instances), any other GPU one Unit for
// itself. Without the MIG queries in the library every GPU is whole.
func (n *NVML) Units() ([]Unit, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("NVML session closed")
	}
	var out []Unit
	for _, d := range n.devices {
		us, err := n.units(d)
		if err != nil {
			return nil, err
		}
		out = append(out, us...)
	}
	return out, nil
}

// units is Units for one device.
func (n *NVML) units(d Device) ([]Unit, error) {
	if n.mig {
		current, _, ret := d.handle.GetMigMode()
		switch {
		case ret == nvml.SUCCESS && current == nvml.DEVICE_MIG_ENABLE:
			return n.migUnits(d)
		case ret == nvml.SUCCESS, ret == nvml.ERROR_NOT_SUPPORTED, ret == nvml.ERROR_FUNCTION_NOT_FOUND:
			// Not in MIG mode, or not a MIG-capable GPU: whole.
		default:
			return nil, fmt.Errorf("GPU%d MIG mode: %s", d.Index, errorString(n.lib, ret))
		}
	}
	mem, ret := d.handle.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU%d memory: %s", d.Index, errorString(n.lib, ret))
	}
	return []Unit{{Device: d.Index, UUID: d.UUID, Name: d.Name, Total: mem.Total, Free: mem.Free}}, nil
}

// migUnits lists the MIG devices of d, a GPU in MIG mode. An index without
// an instance (NOT_FOUND, or INVALID_ARGUMENT beyond what the driver
// numbers) is skipped.
func (n *NVML) migUnits(d Device) ([]Unit, error) {
	count, ret := d.handle.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU%d MIG device count: %s", d.Index, errorString(n.lib, ret))
	}
	var out []Unit
	for i := range count {
		h, ret := d.handle.GetMigDeviceHandleByIndex(i)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return nil, fmt.Errorf("GPU%d MIG %d: %s", d.Index, i, errorString(n.lib, ret))
		}
		u := Unit{Device: d.Index, MIG: i + 1}
		if u.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU%d MIG %d UUID: %s", d.Index, i, errorString(n.lib, ret))
		}
		if u.Name, ret = h.GetName(); ret != nvml.SUCCESS || u.Name == "" {
			u.Name = d.Name
		}
		mem, ret := h.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU%d MIG %d memory: %s", d.Index, i, errorString(n.lib, ret))
		}
		u.Total, u.Free = mem.Total, mem.Free
		out = append(out, u)
	}
	return out, nil
}
