package zmtp

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound what peers can make the supervisor hold. The zero value of
// a field means its default (see DefaultLimits).
type Limits struct {
	// MaxMessage is the most bytes one inbound message may carry (all
	// frames). It is checked at each frame header, before anything is
	// allocated; a peer that declares more loses its connection.
	MaxMessage int64
	// MaxFrames is the most frames in one inbound message.
	MaxFrames int
	// MaxConns is the most connections per socket, in handshake or
	// established. A further connection is accepted and closed at once.
	MaxConns int
	// MaxHandshakes is the most connections per socket still in their
	// handshake; the oldest is closed to make room for a new one.
	MaxHandshakes int
	// HandshakeTimeout is how long a peer has to complete its greeting
	// and READY (libzmq's ZMQ_HANDSHAKE_IVL, default there 30 s).
	HandshakeTimeout time.Duration
	// MessageIdle is how long a peer may send nothing in the middle of a
	// message; the whole message must also arrive within MessageIdle plus
	// its size at 1 MiB/s. Past either the connection is closed.
	MessageIdle time.Duration
	// MaxSubscriptions is the most distinct topics one iopub connection
	// may subscribe to (Jupyter clients subscribe to "" only), and
	// MaxTopic the longest topic.
	MaxSubscriptions int
	MaxTopic         int

	// Outbound queues (bytes accepted for a peer, not yet written).
	// QueueLimit: past it an iopub subscriber of the kernel's owner that
	// still reads holds the writer up (for at most HoldFor per message),
	// any other subscriber misses messages, and a stalled peer (nothing
	// taken for StallAfter) has whole messages dropped. HardLimit: messages are dropped whatever the
	// peer does. TotalQueue: while the queues of all peers together exceed
	// it, a stalled peer is disconnected. PongQueue: a PING is not
	// answered while more than this is queued for the peer.
	QueueLimit, HardLimit, TotalQueue, PongQueue int64
	StallAfter                                   time.Duration
	// HoldFor is the longest a lagging iopub reader of the kernel's owner
	// holds the writer up for one message (see Door.WaitRoom).
	HoldFor time.Duration
}

// DefaultMaxMessage is the default for Limits.MaxMessage: comm buffers of
// hundreds of MB (a FileUpload widget, a model's weights) are normal.
const DefaultMaxMessage = 1 << 30

// DefaultLimits are the limits used where a field of Limits is zero.
var DefaultLimits = Limits{
	MaxMessage:       DefaultMaxMessage,
	MaxFrames:        16384,
	MaxConns:         512,
	MaxHandshakes:    64,
	HandshakeTimeout: 10 * time.Second,
	MessageIdle:      10 * time.Second,
	MaxSubscriptions: 64,
	MaxTopic:         255,
	QueueLimit:       8 << 20,
	HardLimit:        64 << 20,
	TotalQueue:       256 << 20,
	PongQueue:        64 << 10,
	StallAfter:       500 * time.Millisecond,
	HoldFor:          2 * time.Second,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	orDefault(&l.MaxMessage, d.MaxMessage)
	orDefault(&l.MaxFrames, d.MaxFrames)
	orDefault(&l.MaxConns, d.MaxConns)
	orDefault(&l.MaxHandshakes, d.MaxHandshakes)
	orDefault(&l.HandshakeTimeout, d.HandshakeTimeout)
	orDefault(&l.MessageIdle, d.MessageIdle)
	orDefault(&l.MaxSubscriptions, d.MaxSubscriptions)
	orDefault(&l.MaxTopic, d.MaxTopic)
	orDefault(&l.QueueLimit, d.QueueLimit)
	orDefault(&l.HardLimit, d.HardLimit)
	orDefault(&l.TotalQueue, d.TotalQueue)
	orDefault(&l.PongQueue, d.PongQueue)
	orDefault(&l.StallAfter, d.StallAfter)
	orDefault(&l.HoldFor, d.HoldFor)
	return l
}

func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Thresholds that are not worth a knob.
const (
	// stageAbove: an inbound frame larger than this is read whole into a
	// buffer of ours in chunks, allocated as the bytes arrive (readBody).
	stageAbove = 64 << 10
	// maxCommand is the largest command frame accepted after the
	// handshake (PING, PONG, SUBSCRIBE, CANCEL are all small).
	maxCommand = 4 << 10
	// maxReady is the largest READY command accepted.
	maxReady = 8 << 10
	// readBuffer is each connection's read buffer.
	readBuffer = 16 << 10
	// fdReserve is how many descriptors connections leave to everything
	// else (the kernel's pipes, cgroup and /proc files for the tree kill,
	// NVML): new connections are refused past RLIMIT_NOFILE minus this.
	fdReserve = 128
)

// Shared is what all the sockets of one relay share: the limits, the
// logger, and the totals the limits are checked against.
type Shared struct {
	lim   Limits
	log   *slog.Logger
	rl    *rateLog
	curve *CurveKeys // nil: the NULL mechanism

	conns     atomic.Int64 // connections of every door, in handshake or established
	queued    atomic.Int64 // bytes queued for peers of every door
	receiving atomic.Int64 // bytes of inbound messages not yet complete
	recv      recvBook     // who holds them (recv.go)
	dropped   atomic.Int64 // messages dropped for peers that stopped reading

	idleMu sync.Mutex
	idle   chan struct{} // closed when queued drops to 0, for Drain

	own ownBook // who owns which routing identity, across the doors (owned.go)
}

// Dropped returns how many messages were dropped for peers that did not
// read them (see Limits.QueueLimit).
func (s *Shared) Dropped() int64 { return s.dropped.Load() }

// NewShared returns the state the doors of one relay share. lg gets one
// line per rule a peer broke, at most every few seconds per kind of rule.
func NewShared(lim Limits, lg *slog.Logger) *Shared {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Shared{lim: lim.withDefaults(), log: lg, rl: newRateLog(lg, 10*time.Second),
		own: ownBook{changed: make(chan struct{}, 1)}}
}

// UseCurve has every door of s speak CurveZMQ as a server with keys, and
// refuse clients that do not; nil means the NULL mechanism, the default.
// Call it before the doors are bound.
func (s *Shared) UseCurve(keys *CurveKeys) { s.curve = keys }

// Mechanism is the security mechanism the doors of s speak.
func (s *Shared) Mechanism() string {
	if s.curve != nil {
		return MechCurve
	}
	return MechNull
}

// Limits returns the limits in force (defaults filled in).
func (s *Shared) Limits() Limits { return s.lim }

// receiveBudget is how many bytes of incomplete inbound messages all peers
// together may make the supervisor hold: one message of the largest size,
// plus room for ordinary traffic beside it.
func (s *Shared) receiveBudget() int64 { return s.lim.MaxMessage + 64<<20 }

// fdRoom reports whether one more connection leaves fdReserve descriptors
// free under the current RLIMIT_NOFILE, read each time (a supervisor's
// limit can be lowered while it runs, with prlimit).
func (s *Shared) fdRoom() bool {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		return true
	}
	return uint64(s.conns.Load()+fdReserve) < rl.Cur
}
