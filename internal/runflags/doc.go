// Package runflags is the command line and the TFGPU_ environment of
// `tfgpu-kernel run`, and the flag conventions every subcommand shares.
//
// It owns the rules: which run flags a kernelspec may carry
// (KernelspecFlags) and how each is checked (Flags.Define, Flags.Check),
// that every flag may also come from its TFGPU_<FLAG> variable (EnvName,
// Parse; an empty variable is an unset one), which other TFGPU_ names are
// known (InternalEnv) and which are typos to refuse (CheckEnv,
// NoSuchSetting), the wheel's --settings file, and how run's arguments
// become the supervisor's wrapper.Config (Config), a refusing one when a
// setting is bad but the connection file is usable
// (docs/design.md#bad-settings). `run` and `install` use the same code, so
// install refuses exactly what run would refuse at every kernel start.
//
// Errors are one line naming a setting as the user gave it (--flag, or
// the TFGPU_ variable that set it) with a valid value. Parse says nothing;
// Config and UsageError say a usage error on stderr, one line, as
// `tfgpu-kernel CMD: …`, and give exit code 2. Config also tunes the Go
// runtime for a supervisor (GOMAXPROCS, GOGC) unless the environment sets
// them; nothing else here has side effects but --settings' env, which
// Config sets in this process's environment as a kernelspec's env would
// be.
package runflags
