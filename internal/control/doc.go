// Package control is the policy of `tfgpu-kernel stop` and `start`: which
// recorded kernels an operator's name or selection picks, and how each is
// stopped (parked by its running supervisor, held down, or its tree killed
// through its record), let start again, or stopped for being idle; and
// how `ps` shows the kernels found (Table, Prometheus: the text exposition
// format for node_exporter's textfile collector, docs/operating.md#metrics).
//
// It owns no state of its own: it reads the supervisors' records
// (internal/record), leaves orders in the directories they hold open and
// signals them, and kills a tree only through record.FinishKernel. It
// assumes the caller has parsed and checked the command line; what it
// says goes to the writers it is given, one kernel's lines together, in
// the order of the kernels it was given.
//
// Stop, StopIdle and Start are idempotent: a parked kernel stopped again
// is said to be parked already, a kernel not held is said not to be, and a
// kernel gone is not found. RunningOn names the kernels still running on
// a kernelspec, for install --uninstall. A kernel that runs a cell is never stopped for
// being idle: each is checked again just before it is.
package control
