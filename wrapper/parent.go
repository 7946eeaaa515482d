package wrapper

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// parentDeathSignal is what the kernel delivers to the supervisor when the
// thread that started it exits (prctl(2) PR_SET_PDEATHSIG). That is usually
// the Jupyter server dying, but a multi-threaded launcher's thread exiting
// sends it too, so the handler checks parentGone before stopping, which is
// why it is not SIGTERM.
const parentDeathSignal = unix.SIGUSR2

var startPPID = os.Getppid()

// watchParent asks for parentDeathSignal when the parent dies. Call it after
// signal.Notify for that signal, since its default action ends the process;
// a parent that died before is caught by parentGone.
// The returned func undoes it (for tests that call Run in-process).
func watchParent() (undo func()) {
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(parentDeathSignal), 0, 0, 0)
	return func() { _ = unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0) }
}

// parentGone reports whether the process that started the supervisor has
// exited: the parent changed, or the launcher jupyter_client named in
// JPY_PARENT_PID no longer exists.
func parentGone() bool {
	return os.Getppid() != startPPID || jupyterParentGone()
}

// jupyterParentGone reports whether the process jupyter_client named in
// JPY_PARENT_PID (the server, or the client that launched the kernel)
// has exited. A standby waiting for a restart asks it too.
func jupyterParentGone() bool {
	v, err := strconv.Atoi(os.Getenv("JPY_PARENT_PID"))
	return err == nil && v > 1 && errors.Is(unix.Kill(v, 0), unix.ESRCH)
}
