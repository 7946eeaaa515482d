// Package doctor is `tfgpu-kernel doctor`: what the supervisor would find
// on this host (cgroups, containment, memory limits, NVML and persistence
// mode, kernel records and GPU checks left unfinished), one Finding each,
// a problem with the command that fixes it. It reads and probes; it
// changes nothing but its own probe cgroups and handoffs already released.
package doctor
