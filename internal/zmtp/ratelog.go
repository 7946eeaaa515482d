package zmtp

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// rateLog writes at most one line per kind of event every interval, so a
// peer that breaks a rule a million times costs the log a few lines. A line
// after a quiet spell says how many of its kind were not logged.
type rateLog struct {
	lg       *slog.Logger
	interval time.Duration

	mu    sync.Mutex
	kinds map[string]*rateKind
}

type rateKind struct {
	last       time.Time
	suppressed int
}

func newRateLog(lg *slog.Logger, interval time.Duration) *rateLog {
	return &rateLog{lg: lg, interval: interval, kinds: map[string]*rateKind{}}
}

// warn logs msg with attrs unless a line of the same msg was logged less
// than interval ago. msg must be a constant: it is the kind.
func (r *rateLog) warn(msg string, attrs ...any) {
	r.mu.Lock()
	k := r.kinds[msg]
	if k == nil {
		if len(r.kinds) > 256 { // a constant msg makes this impossible; stay bounded anyway
			r.kinds = map[string]*rateKind{}
		}
		k = &rateKind{}
		r.kinds[msg] = k
	}
	now := time.Now()
	if !k.last.IsZero() && now.Sub(k.last) < r.interval {
		k.suppressed++
		r.mu.Unlock()
		return
	}
	n := k.suppressed
	k.last, k.suppressed = now, 0
	r.mu.Unlock()
	if n > 0 {
		attrs = append(attrs, "not_logged_before", n)
	}
	r.lg.Log(context.Background(), slog.LevelWarn, msg, attrs...)
}

// RateLimitedWarn returns a function that logs a warning msg at most once
// per interval, counting what it did not log. For callers outside this
// package with floods of their own (forged messages).
func RateLimitedWarn(lg *slog.Logger, interval time.Duration) func(msg string, attrs ...any) {
	return newRateLog(lg, interval).warn
}
