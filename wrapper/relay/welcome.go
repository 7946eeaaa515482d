package relay

import (
	"bytes"
	"sync"
	"unicode/utf8"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

// Since ipykernel 7.2 the kernel's iopub is an XPUB that answers each new
// subscription with an iopub_welcome (messaging spec 5.5, JEP 65): the
// message, published with the subscribed topic as its first frame, tells a
// client that its subscription is in place. Behind the relay the kernel
// sees one subscriber, the relay's SUB, and welcomes only it; the clients
// subscribe at the outer door. So the relay keeps the kernel's welcome to
// itself and, once it has seen one (the kernel speaks welcomes; older
// kernels are left as they are), answers the clients as the kernel would:
// a signed iopub_welcome, in the kernel's session, for every topic that
// gains its first subscriber (zmtp.Door.OnSubscribe, which reports what an
// XPUB without XPUB_VERBOSE reports), and at once for the topics clients
// subscribed to before the kernel's welcome came.
type welcomer struct {
	r    *Relay
	door *zmtp.Door

	mu      sync.Mutex
	session string // the kernel's session id; "" until its welcome came
	queue   chan []byte
}

// welcomeQueue bounds the topics waiting for their welcome; a door allows
// 64 topics per connection, and a flood of subscriptions only costs the
// flooder its welcomes.
const welcomeQueue = 256

func newWelcomer(r *Relay, door *zmtp.Door) *welcomer {
	w := &welcomer{r: r, door: door, queue: make(chan []byte, welcomeQueue)}
	door.OnSubscribe(w.subscribed)
	go w.run()
	return w
}

var idsDelimiter = []byte("<IDS|MSG>")

// fromKernel reports whether frames are the kernel's welcome to the
// relay's own subscription (then they are not for the clients). The first
// one switches welcoming on.
func (w *welcomer) fromKernel(frames [][]byte) bool {
	// ipykernel publishes the welcome to the relay's subscription ("")
	// without a topic frame; every other message it publishes has one.
	if len(frames) == 0 || !bytes.Equal(frames[0], idsDelimiter) {
		return false
	}
	p, ok := w.r.verified(frames, "iopub_welcome")
	if !ok {
		return false
	}
	h, err := jmsg.Header(p.Header)
	if err != nil {
		return true
	}
	w.mu.Lock()
	first := w.session == ""
	w.session = h.Session
	w.mu.Unlock()
	if first {
		w.r.log.Debug("the kernel welcomes iopub subscribers (ipykernel ≥ 7.2): welcoming the clients")
		for _, t := range w.door.Topics() {
			w.subscribed(t)
		}
	}
	return true
}

// subscribed queues the welcome for topic, once the kernel speaks them.
func (w *welcomer) subscribed(topic []byte) {
	if !utf8.Valid(topic) {
		return // ipykernel welcomes only topics it can decode
	}
	w.mu.Lock()
	on := w.session != ""
	w.mu.Unlock()
	if !on {
		return
	}
	select {
	case w.queue <- bytes.Clone(topic):
	default:
		w.r.warnPeer("too many iopub subscriptions at once: some were not welcomed")
	}
}

func (w *welcomer) run() {
	for {
		select {
		case <-w.r.ctx.Done():
			return
		case topic := <-w.queue:
			w.mu.Lock()
			session := w.session
			w.mu.Unlock()
			var idents [][]byte
			if len(topic) > 0 {
				idents = [][]byte{topic}
			}
			// Live only: a welcome answers the subscriptions of now, and
			// a later one gets its own (zmtp.Door.SendLive).
			frames, err := jmsg.NewMessage(w.r.signer, idents, "iopub_welcome", nil, session,
				map[string]any{"subscription": string(topic)})
			if err == nil {
				err = w.door.SendLive(frames)
			}
			if err != nil {
				w.r.log.Debug("cannot welcome an iopub subscriber", "err", err)
			}
		}
	}
}
