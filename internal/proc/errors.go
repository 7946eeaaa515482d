package proc

import "errors"

var (
	// ErrReaperStopped is returned (wrapped) by Reaper.StartProcess after Stop.
	ErrReaperStopped = errors.New("reaper stopped")
	// ErrUnsupported is returned (wrapped) where the platform lacks the mechanism.
	ErrUnsupported = errors.New("not supported on this platform")
)
