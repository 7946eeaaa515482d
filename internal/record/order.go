package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// An Order is what `tfgpu-kernel stop` asks of a running supervisor
// (docs/design.md#parked-kernels): to kill its kernel's tree, confirm the
// GPU release and keep the kernel's place (parked) until a client's next
// request starts a fresh kernel. It is written to the state directory as
// <id>.stop, owned by the directory's owner (root's stop hands it over),
// and the supervisor is sent SIGUSR1; the supervisor takes it and records
// the outcome in its record's Parked.
type Order struct {
	By  string    `json:"by"`            // who stopped the kernel: a user name
	Why string    `json:"why,omitempty"` // e.g. "idle for 2h0m0s"
	At  time.Time `json:"at"`
	// Hold keeps the kernel down: a request that needs a kernel is
	// answered with an error saying so, until HoldUntil (zero: until
	// `tfgpu-kernel start`). Message is the operator's word for the user.
	Hold      bool      `json:"hold,omitempty"`
	HoldUntil time.Time `json:"hold_until,omitempty"`
	Message   string    `json:"message,omitempty"`
	// Start lifts the hold of a parked kernel (`tfgpu-kernel start`).
	Start bool `json:"start,omitempty"`
}

// Held reports whether o holds the kernel down at now.
func (o *Order) Held(now time.Time) bool {
	return o != nil && o.Hold && (o.HoldUntil.IsZero() || now.Before(o.HoldUntil))
}

// Parked is what a supervisor records of its parked kernel.
type Parked struct {
	At       time.Time `json:"at"`
	By       string    `json:"by,omitempty"`  // who stopped it ("" for the supervisor itself)
	Why      string    `json:"why,omitempty"` // e.g. "idle for 2h0m0s", "over its GPU memory limit"
	Killed   int       `json:"processes_killed"`
	Released string    `json:"gpu_released,omitempty"` // NVML's confirmation, as ps prints it
	Held     string    `json:"gpu_held,omitempty"`     // what NVML still listed at the confirm timeout
	// GPU is what was released per device, in bytes, when NVML confirmed
	// it.
	GPU map[int]int64 `json:"gpu_released_bytes,omitempty"`
	// Hold: the kernel stays down (Order.Hold), until HoldUntil (zero:
	// until started again), with the operator's Message.
	Hold      bool      `json:"hold,omitempty"`
	HoldUntil time.Time `json:"hold_until,omitempty"`
	Message   string    `json:"message,omitempty"`
}

// StateOf reads the record of kernel id in d, checked as ReadStates checks
// records.
func (d *Dir) StateOf(id string) (State, error) { return d.stateOf(id) }

// PhaseParked: the supervisor killed its kernel's tree on an Order (or at
// the GPU memory limit) and keeps its place; the next request starts a
// fresh kernel.
const PhaseParked = "parked"

func orderName(id string) string { return id + ".stop" }

// maxOrderText bounds By and Why.
const maxOrderText = 200

// WriteOrder leaves o for the supervisor of kernel id. Root's order is
// handed to the directory's owner, whose supervisor reads only files of
// its own user.
func (d *Dir) WriteOrder(id string, o Order) error {
	if !ValidKernelID(id) {
		return fmt.Errorf("%q: not a kernel id", id)
	}
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	f, err := d.create(orderName(id), b)
	if err != nil {
		return err
	}
	defer f.Close()
	if os.Geteuid() == 0 && d.uid != 0 {
		if err := f.Chown(d.uid, -1); err != nil {
			_ = d.remove(orderName(id))
			return fmt.Errorf("hand the stop order to uid %d: %w", d.uid, err)
		}
	}
	return nil
}

// TakeOrder returns and removes the order for kernel id; nil and no error
// when there is none.
func (d *Dir) TakeOrder(id string) (*Order, error) {
	if !ValidKernelID(id) {
		return nil, nil
	}
	b, err := d.read(orderName(id))
	_ = d.remove(orderName(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stop order of kernel %s: %w", id, err)
	}
	var o Order
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("stop order of kernel %s: %w", id, err)
	}
	o.By, o.Why, o.Message = clip(Printable(o.By)), clip(Printable(o.Why)), clip(Printable(o.Message))
	return &o, nil
}

func clip(s string) string {
	if len(s) > maxOrderText {
		return s[:maxOrderText] + "…"
	}
	return s
}
