// Package record keeps the kernel records (docs/design.md#kernel-records):
// one state file per kernel in a state directory, written by its
// supervisor and read back by the next supervisor, the watcher, and `ps`,
// `stop` and `doctor`.
//
// Contract:
//   - A state directory is the user's own, mode 0700, not a link (OpenDir);
//     files in it are read without following links and only when its owner
//     owns them, and written by rename (dir.go).
//   - A record read back is a claim, not an order: every field is checked
//     against what a supervisor of that kernel, run by the record's owner,
//     makes before anything is done with it (check.go); what does not check
//     out wraps ErrRefused and is said, never obeyed (docs/security.md).
//   - Finishing a recorded kernel is one sequence, FinishKernel: watch what
//     the tree holds on the GPU → kill it through what the record names →
//     remove its cgroups, inner directory and record → confirm the release.
//   - The restart handoff (handoff.go) carries the GPU check from a
//     restarted kernel's supervisor to the next one; the identities file
//     (identities.go) carries who owns which routing identity, bounded
//     per peer and in all, the kernel owner's first.
//   - A kernel is its owner and its id (Key), across all its processes and
//     generations; which live processes are a kernel's, in which role, is
//     answered only by Census (census.go), from its records, each pid
//     checked against /proc; ps, stop, doctor, the metrics and uninstall ask
//     it (docs/design.md#processes).
//   - Root finds every user's kernels from the state directories running
//     tfgpu-kernel processes hold open (Collect, discover.go), within a
//     fixed share of each user's processes, directories and records
//     (budget.go); what a user wrote is cut to size when read back
//     (bounds.go) and Printable before it is shown.
//   - ps rows (ps.go) are what the records name, as it is now.
package record
