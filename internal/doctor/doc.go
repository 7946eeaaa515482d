// Package doctor is `tfgpu-kernel doctor`: what the supervisor would find
// on this host (cgroups, containment, memory limits, NVML and persistence
// mode, kernel records and GPU checks left unfinished, the spare kernels
// kept, and the tfgpu kernelspecs Jupyter finds with the Python each
// runs), one Finding each, a problem with the command that fixes it. All
// is every finding in the order the command says them; the command only
// prints them. It reads and probes; it changes nothing but its own probe
// cgroups and handoffs already released.
//
// It reads a kernelspec's argv as run and the spare kernel read it
// (wrapper/spare's Parse), so that what it says of a spare is what run
// would do; it imports nothing else of wrapper.
package doctor
