package gpu

import "time"

// ConfirmPoll is how often NVML is asked while waiting for a release.
const ConfirmPoll = 25 * time.Millisecond

// Session is what the supervisor, the watcher, stop, ps and doctor ask of
// NVML. *NVML is a session; Off is the null one, for when NVML cannot be
// used, so that callers ask the same questions either way and get Err's
// reason as the answer.
type Session interface {
	Source
	Devices() []Device
	Free(Device) (uint64, error)
	// Units are the whole GPUs and MIG instances of the watched devices,
	// with their free memory now (see NVML.Units).
	Units() ([]Unit, error)
	Persistence(Device) (bool, error)
	// About is the driver version and what could not be checked, or how,
	// for the log (said once).
	About() (driver string, notes []string)
	// Err is nil for a working session, and for Off why NVML is not used.
	Err() error
	Close()
}

var (
	_ Session = (*NVML)(nil)
	_ Session = off{}
)

// About returns the Driver and Notes fields.
func (n *NVML) About() (string, []string) { return n.Driver, n.Notes }

// Err is nil: an open NVML session works.
func (n *NVML) Err() error { return nil }

// Connect opens NVML (see Open), or returns Off with the reason.
func Connect(path, visible string) Session {
	n, err := Open(path, visible)
	if err != nil {
		return Off(err)
	}
	return n
}

// Off is the null session: no devices, and every question answered with
// why (which must not be nil).
func Off(why error) Session { return off{why} }

type off struct{ why error }

func (o off) Holders() ([]Holder, error)       { return nil, o.why }
func (o off) Devices() []Device                { return nil }
func (o off) Free(Device) (uint64, error)      { return 0, o.why }
func (o off) Units() ([]Unit, error)           { return nil, o.why }
func (o off) Persistence(Device) (bool, error) { return false, o.why }
func (o off) About() (string, []string)        { return "", nil }
func (o off) Err() error                       { return o.why }
func (o off) Close()                           {}
