// Package gpu asks the NVIDIA driver, through NVML, which processes hold
// GPU memory, so that the supervisor can confirm that a dead kernel's CUDA
// contexts are gone before a new kernel starts (docs/design.md#gpu-confirmation).
//
// NVML is reached through github.com/NVIDIA/go-nvml, which dlopens the
// library at Init: by its soname, libnvidia-ml.so.1, so that the dynamic
// loader (and LD_LIBRARY_PATH) picks it, unless a path is given. go-nvml
// binds the NVML symbols of the program lazily, so the binary must be linked
// with lazy binding (install.sh: -ldflags=-extldflags=-Wl,-z,lazy), and a
// function the loaded library lacks must never be called: it would kill the
// process. Open checks every symbol it needs with LookupSymbol first;
// go-nvml itself picks the newest version of the process lists the library
// has (_v3, _v2, or the first one).
//
// Contract: a Session is what callers ask; Connect returns Off (the null
// session, every question answered with why) when NVML cannot be used.
// Confirm attributes entries to a killed tree by pid, or by baseline where
// NVML's pids are not this PID namespace's, and FormatBytes is how figures
// are written everywhere.
//
// Everything here degrades: no library, no driver, an init failure or
// figures NVML cannot give make Open or a query return an error that says
// what could not be checked; the caller logs it once and carries on.
package gpu
