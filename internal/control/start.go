package control

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// Start lifts the hold of each of chosen (see Pick; stop --hold), says
// what it did on out and each failure on errOut, and returns 1 when one
// failed, else 0.
func Start(out, errOut io.Writer, chosen []record.State, timeout time.Duration) int {
	code := 0
	for _, o := range stopEach(out, errOut, chosen, func(st record.State, w *stopOutput) {
		if err := liftHold(w, st, timeout); err != nil {
			w.errorf("tfgpu-kernel start: kernel %s: %s\n", Label(st), record.Printable(err.Error()))
		}
	}) {
		if o.failed {
			code = 1
		}
	}
	return code
}

// liftHold asks st's supervisor to lift its kernel's hold, and waits until
// its record says so.
func liftHold(w *stopOutput, st record.State, timeout time.Duration) error {
	switch {
	case !st.SupervisorAlive() || st.SupervisorStopped():
		return errors.New("its supervisor is not running")
	case st.Phase != record.PhaseParked || st.Parked == nil:
		return errors.New("it is not stopped (" + st.Phase + ")")
	case !st.Parked.Hold:
		w.printf("kernel %s is not held: its next request starts a fresh kernel\n", Label(st))
		return nil
	}
	d, err := record.SupervisorDir(st) // as parkOne: the directory it holds open
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.WriteOrder(st.KernelID, record.Order{By: record.UserName(os.Geteuid()), At: time.Now().UTC(), Start: true}); err != nil {
		return err
	}
	if err := syscall.Kill(st.SupervisorPID, syscall.SIGUSR1); err != nil {
		_, _ = d.TakeOrder(st.KernelID)
		return err
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if now, err := d.StateOf(st.KernelID); err == nil && now.Parked != nil && !now.Parked.Hold {
			w.printf("kernel %s: hold lifted; its next request starts a fresh kernel\n", Label(st))
			return nil
		}
	}
	_, _ = d.TakeOrder(st.KernelID)
	return fmt.Errorf("its supervisor did not lift the hold within %v", timeout)
}
