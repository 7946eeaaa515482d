// Command tfgpu-kernel makes Jupyter's "Restart Kernel" a hard reset for GPU
// notebooks: it supervises a real ipykernel in its own process tree, relays
// the five Jupyter channels, and on restart, shutdown or crash kills the
// whole tree before a new kernel starts.
//
// The command is thin: each subcommand parses its flags, calls one
// function and prints. run and the hidden standby role read their
// settings with internal/runflags (Config) and call wrapper.Run; ps, stop
// and start find and act on kernels through internal/control (Collect,
// Stop, StopIdle, Start, Table, Prometheus); doctor prints
// internal/doctor's findings (All); install calls kernelspec
// (Command.Install, Command.Uninstall). Flags may also come from TFGPU_<FLAG> variables
// (internal/runflags). Usage errors are one line on stderr and exit code 2.
package main
