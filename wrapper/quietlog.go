package wrapper

import (
	"context"
	"log/slog"
	"sync"
)

// quietLog is a standby's log handler until it is adopted: its start-up
// lines below Warn (NVML, the engine, the containment) go out at Debug and
// are kept, and replay (Adopt) writes them as they were, so that each
// supervisor of a kernel says them once, and a standby that is never used
// says nothing.
type quietLog struct {
	slog.Handler
	q *quietState
}

type quietState struct {
	mu    sync.Mutex
	quiet bool
	kept  []keptRecord
}

type keptRecord struct {
	h slog.Handler
	r slog.Record
}

// maxKept bounds the start-up lines kept for the replay.
const maxKept = 32

func newQuietLog(lg *slog.Logger) (*slog.Logger, *quietState) {
	q := &quietState{quiet: true}
	return slog.New(quietLog{lg.Handler(), q}), q
}

func (h quietLog) Enabled(ctx context.Context, l slog.Level) bool {
	if l < slog.LevelWarn {
		h.q.mu.Lock()
		quiet := h.q.quiet
		h.q.mu.Unlock()
		if quiet {
			return true // kept for the replay
		}
	}
	return h.Handler.Enabled(ctx, l)
}

func (h quietLog) Handle(ctx context.Context, r slog.Record) error {
	h.q.mu.Lock()
	quiet := h.q.quiet && r.Level < slog.LevelWarn
	if quiet && r.Level >= slog.LevelInfo && len(h.q.kept) < maxKept {
		h.q.kept = append(h.q.kept, keptRecord{h.Handler, r.Clone()})
	}
	h.q.mu.Unlock()
	if quiet {
		r.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietLog) WithAttrs(as []slog.Attr) slog.Handler {
	return quietLog{h.Handler.WithAttrs(as), h.q}
}
func (h quietLog) WithGroup(n string) slog.Handler { return quietLog{h.Handler.WithGroup(n), h.q} }

// speak ends the quiet and writes the kept start-up lines as they were.
func (q *quietState) speak() {
	q.mu.Lock()
	kept := q.kept
	q.quiet, q.kept = false, nil
	q.mu.Unlock()
	for _, k := range kept {
		if k.h.Enabled(context.Background(), k.r.Level) {
			_ = k.h.Handle(context.Background(), k.r)
		}
	}
}
