// Package kernelspec writes and removes the Jupyter kernelspec that makes
// Jupyter launch a kernel through the tfgpu-kernel supervisor.
//
// # What it owns
//
// A kernelspec is a directory KERNELS/NAME holding kernel.json and logos
// (https://jupyter-client.readthedocs.io/en/stable/kernels.html#kernel-specs).
// The kernel.json this package writes runs
//
//	<tfgpu-kernel> run [RunFlags…] -f {connection_file} -- <python> -m ipykernel_launcher -f {connection_file}
//
// with interrupt_mode "signal" (the supervisor forwards SIGINT to the
// kernel's process group), metadata.debugger true,
// metadata.supported_encryption ["curve"] (the supervisor's outer sockets
// speak CurveZMQ when the connection file has keys), env DefaultEnv
// (TF_FORCE_GPU_ALLOW_GROWTH=true, XLA_PYTHON_CLIENT_PREALLOCATE=false)
// unless the caller overrides it, and
// metadata.tfgpu recording the supervisor version and the Python. Keys are
// written in a fixed order with two-space indentation, so the file is stable
// and diffable (golden files in testdata/).
//
// # Wrapping an existing kernelspec
//
// With Options.Wrap (`install --wrap KERNELSPEC`) the kernel.json runs
// another kernelspec's argv under the supervisor, unchanged but for a bare
// "python" argv[0] (see Foreign.Python):
//
//	<tfgpu-kernel> run [RunFlags…] -f {connection_file} -- <their argv…>
//
// KERNELSPEC is a name, found by FindSpec through the chosen Python's
// jupyter_client (KernelSpecManager.get_kernel_spec: JUPYTER_PATH, the user
// data dir, that Python's sys.prefix/share/jupyter, /usr/local/share/jupyter,
// /usr/share/jupyter, in jupyter_core's order for its version — asking it
// rather than copying the rule keeps the answer right across jupyter_core
// releases), or a directory holding kernel.json (anything with a '/').
// Their argv must have "{connection_file}" as an argument of its own, and
// a spec that already runs under tfgpu-kernel is refused. The wrapper keeps
// their language, interrupt_mode (default "signal"), metadata (debugger
// default true), their logos (ours when they have none), kernel.js and
// kernel.css; env is DefaultEnv, then theirs, then Options.Env. The name
// defaults to "<theirs>-tfgpu", the display name to "<theirs> (clean
// restart)"; metadata.tfgpu records what was wrapped. Their directory is only
// read: the wrapper may not be written over it or take its name.
//
// KERNELS is chosen the way jupyter_core.paths and `jupyter kernelspec
// install` choose it:
//   - User: $JUPYTER_DATA_DIR/kernels if set, else
//     ${XDG_DATA_HOME:-$HOME/.local/share}/jupyter/kernels (Linux rule of
//     jupyter_core 4.x/5.x; $HOME with symlinks resolved);
//   - SysPrefix: <sys.prefix of the chosen Python>/share/jupyter/kernels;
//   - Prefix: DIR/share/jupyter/kernels.
//
// # What it assumes
//
// The Python is found by FindPython: the one given, else the first of
// `python3` on PATH and /usr/bin/python3 that can import ipykernel (each
// asked with a timeout). Its sys.executable — not a pyenv shim or a name
// looked up at launch — goes into argv, so the kernel keeps working when PATH
// changes. The supervisor binary must be given as an absolute path.
//
// # Safety and idempotence
//
// Install refuses to touch an existing NAME directory unless Options.Replace
// is set; the new directory is written beside the old one and renamed into
// place, so Jupyter never sees a half-written spec. Installing twice with
// Replace is idempotent. Uninstall removes NAME only when its kernel.json
// carries metadata.tfgpu, so it never deletes a kernelspec someone else
// wrote; a missing directory is reported as an error wrapping
// fs.ErrNotExist. RunsBinary finds the kernelspecs of ours that run a
// given binary (what stops working when it is removed: --wrap twins), and
// UninstallDir removes one by its directory, under the same rule. Names are validated (and lower-cased) as jupyter_client
// does: [a-z0-9._-]+, case-insensitive.
//
// # Upgrades
//
// An upgrade (Replace) keeps what the installed kernelspec of ours was
// configured with and the command line does not give again (Keep): the
// Python or what it wraps, its run flags, its env and its display name; a
// setting given now wins, and a run flag and its TFGPU_ variable are one
// setting. Which run flags there are, and the variable of each, are run's
// rules (internal/runflags), given to Keep in an Upgrade, since that
// package imports this one. Previous.Runs tells the supervisors started
// from an installed kernelspec by their argv. Command is `tfgpu-kernel
// install` with its flags parsed: its Install and Uninstall hold the
// command's rules (upgrades, the wheel's settings file, --with-wraps).
//
// A kernelspec for every user (Dest System, root only) is root's whole:
// the supervisor, the Python or wrapped program (CheckSystemWide), a
// wrapped kernel.json and the directory it and the copied logos,
// kernel.js and kernel.css are in, every directory above (checkRootsAlone),
// each file copied (checked on the file opened), and every absolute path in
// the written argv and env values (checkSystemWidePaths: PYTHONPATH,
// LD_LIBRARY_PATH…) must be root's and writable by no one else; checked in
// plan, before anything is written, at install and at every upgrade.
package kernelspec
