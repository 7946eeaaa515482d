// Command tfgpu-kernel makes Jupyter's "Restart Kernel" a hard reset for GPU
// notebooks: it supervises a real ipykernel in its own process tree, relays
// the five Jupyter channels, and on restart, shutdown or crash kills the
// whole tree before a new kernel starts.
//
// The command is thin: each subcommand parses flags, calls into wrapper
// (run), internal/record (ps, stop), internal/doctor (doctor) or kernelspec
// (install), and prints. Flags may also come from TFGPU_<FLAG> variables
// (flags.go). Usage errors are one line on stderr and exit code 2.
package main
