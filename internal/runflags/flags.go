package runflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// EnvName is the environment variable that stands in for a flag:
// --log-level ↔ TFGPU_LOG_LEVEL. A kernelspec's env or the Jupyter server's
// environment can then set any run flag.
func EnvName(flagName string) string {
	return "TFGPU_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Source names, for each flag filled from its TFGPU_ variable, that
// variable: a value checked after parsing is then reported as what the
// user typed (TFGPU_GPU_MEMORY_LIMIT="abc", not --gpu-memory-limit).
type Source map[string]string

// name is how the user gave flag: "--flag", or the variable that set it.
func (s Source) Name(flag string) string {
	if e, ok := s[flag]; ok {
		return e
	}
	return dashes(flag) + flag
}

// dashes is GNU style: -f, --name.
func dashes(name string) string {
	if len(name) == 1 {
		return "-"
	}
	return "--"
}

// Parse parses args into fs, then fills every flag not given on the
// command line from its TFGPU_ variable. It says nothing: help after
// --help, else the usage error (a cmdlineError when the command line's;
// UsageLine says it).
func Parse(fs *flag.FlagSet, args []string) (src Source, help bool, err error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, true, nil
		}
		return nil, false, cmdlineError{errors.New(FlagError(err))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	src = Source{}
	var bad error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || bad != nil {
			return
		}
		// An empty variable is an unset one (TFGPU_STATE_DIR= in a shell
		// or a kernelspec clears it; it does not ask for "").
		if v := os.Getenv(EnvName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				bad = fmt.Errorf("%s=%q: %v", EnvName(f.Name), v, err)
			}
			src[f.Name] = EnvName(f.Name)
		}
	})
	if bad != nil {
		return nil, false, bad
	}
	return src, false, nil
}

// A cmdlineError is a command line the flag package could not parse.
type cmdlineError struct{ error }

// UsageLine is a usage error as cmd says it: one on the command line with
// a pointer to its --help.
func UsageLine(cmd string, err error) string {
	var c cmdlineError
	if errors.As(err, &c) {
		return fmt.Sprintf("%v (see 'tfgpu-kernel %s --help')", err, cmd)
	}
	return err.Error()
}

// The flag package's own error texts (flag.go), which name flags with one
// dash; FlagError says them GNU style, as the help and the README do.
var (
	flagUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	flagNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
	flagBadValue  = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-+([^:]*): (.*)$`)
)

// FlagError is a parse error of the flag package in the words of the
// help: "unknown flag --bogus", "--kill-timeout \"abc\": want …".
func FlagError(err error) string {
	s := err.Error()
	if m := flagUndefined.FindStringSubmatch(s); m != nil {
		return "unknown flag " + dashes(m[1]) + m[1]
	}
	if m := flagNoValue.FindStringSubmatch(s); m != nil {
		return dashes(m[1]) + m[1] + " needs a value"
	}
	if m := flagBadValue.FindStringSubmatch(s); m != nil {
		why := m[3]
		if why == "parse error" || strings.HasPrefix(why, "strconv.") { // a bool
			why = "want true or false"
		}
		return dashes(m[2]) + m[2] + " " + m[1] + ": " + why
	}
	return s
}

// durationValue is a time.Duration flag whose parse error shows a valid
// value (the flag package's says only "parse error").
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 1.5s, 500ms or 2h")
	}
	*d = durationValue(v)
	return nil
}

// DurationVar defines a duration flag with a helpful parse error.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var((*durationValue)(p), name, usage)
}

// PrintUsage writes a command's usage with its flags GNU style, as users
// type them (--name, -f).
func PrintUsage(w io.Writer, fs *flag.FlagSet, example string) {
	syn := map[string]string{
		"run":   "run [flags] -f FILE -- KERNEL-COMMAND…",
		"stop":  "stop [flags] ID | --all | --idle-for DURATION [--holding-gpu]",
		"start": "start [flags] ID | --all",
	}[fs.Name()]
	if syn == "" {
		syn = fs.Name() + " [flags]"
	}
	fmt.Fprintf(w, "usage: tfgpu-kernel %s\n\nflags:\n", syn)
	PrintFlags(w, fs, nil)
	fmt.Fprintf(w, "\nEvery flag can also be set with TFGPU_<FLAG> (e.g. --log-level ↔ TFGPU_LOG_LEVEL).\n")
	if example != "" {
		fmt.Fprintf(w, "\nexample:\n  %s\n", example)
	}
}

// PrintFlags writes fs's flags (those keep accepts; all for nil) in
// lexical order, GNU style, with their defaults.
func PrintFlags(w io.Writer, fs *flag.FlagSet, keep func(*flag.Flag) bool) {
	fs.VisitAll(func(f *flag.Flag) {
		if keep != nil && !keep(f) {
			return
		}
		arg, help := flag.UnquoteUsage(f)
		switch {
		case arg == "":
		case func() bool { _, ok := f.Value.(*durationValue); return ok }():
			arg = " DURATION"
		case arg == "string" || arg == "value":
			arg = " VALUE"
		default:
			arg = " " + strings.ToUpper(arg)
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0s" {
			def = fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "  %s%s%s\n        %s%s\n", dashes(f.Name), f.Name, arg, help, def)
	})
}
