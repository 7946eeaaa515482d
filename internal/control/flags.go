package control

import (
	"errors"
	"fmt"
	"time"
)

// StopFlags are what a stop command line gave, for CheckStop.
type StopFlags struct {
	All        bool          // --all
	IdleFor    time.Duration // --idle-for; 0: not given
	HoldingGPU bool          // --holding-gpu
	Exit, Hold bool          // --exit, --hold
	Until      string        // --until, as given
	Message    string        // --message
	Timeout    time.Duration // --timeout
	Confirm    time.Duration // --confirm-timeout
	Args       int           // how many kernel ids were given
}

// CheckStop is the usage error of a stop command line, or nil: one
// selection (a kernel id, --all or --idle-for), positive durations, and
// only the modes that go together.
func CheckStop(f StopFlags) error {
	idle := f.IdleFor > 0
	switch {
	case f.IdleFor < 0:
		return fmt.Errorf("--idle-for %v: give a positive duration, e.g. 2h", f.IdleFor)
	case f.Timeout <= 0:
		return fmt.Errorf("--timeout %v: give a positive duration, e.g. 15s", f.Timeout)
	case f.Confirm <= 0:
		return fmt.Errorf("--confirm-timeout %v: give a positive duration, e.g. 10s", f.Confirm)
	case f.HoldingGPU && !idle:
		return errors.New("--holding-gpu goes with --idle-for")
	case f.Until != "" && !f.Hold:
		return errors.New("--until goes with --hold")
	case f.Exit && (f.Hold || f.Message != ""):
		return errors.New("--exit ends the supervisor; --hold and --message need it to stay")
	case btoi(f.All)+btoi(idle)+f.Args != 1:
		return errors.New("give one kernel id, --all, or --idle-for DURATION")
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
