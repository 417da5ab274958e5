package main

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// acceptedMsg is what core/store logs, at Info, right after a door's
// CreateRun has committed the run (and so sent its NOTIFY).
const acceptedMsg = "run queued"

// accepted keeps when the doors in this process accepted each run: the
// moment their store logged acceptedMsg, keyed by run id. The provider
// side takes each entry out as its run frame arrives.
type accepted struct {
	m sync.Map // run id → time.Time, or frameFirst when the frame came first
}

// frameFirst is a run frame that arrived before its door's CreateRun had
// returned (the broker heard the NOTIFY, which is sent at commit, before
// the door's goroutine ran again): its latency is resolved, as 0, when
// the door's record comes.
type frameFirst struct {
	at time.Time
	p  *probe
}

func (a *accepted) put(runID string, at time.Time) {
	v, loaded := a.m.LoadOrStore(runID, at)
	if !loaded {
		return
	}
	a.m.Delete(runID)
	if ff, ok := v.(frameFirst); ok {
		ff.p.counts.Lock()
		ff.p.accepted.add(max(0, ff.at.Sub(at)))
		ff.p.acceptedMissing.Add(-1)
		ff.p.acceptedEarly.Add(1)
		ff.p.counts.Unlock()
	}
}

// take returns and forgets runID's accepted time.
func (a *accepted) take(runID string) (time.Time, bool) {
	if a == nil {
		return time.Time{}, false
	}
	v, ok := a.m.LoadAndDelete(runID)
	if !ok {
		return time.Time{}, false
	}
	at, ok := v.(time.Time)
	return at, ok
}

// arrive is take for a run frame that arrived at now in phase p: when the
// door has not yet recorded the run, the frame waits for it (put resolves
// it) and ok is false.
func (a *accepted) arrive(runID string, now time.Time, p *probe) (time.Time, bool) {
	v, loaded := a.m.LoadOrStore(runID, frameFirst{at: now, p: p})
	if !loaded {
		return time.Time{}, false
	}
	a.m.Delete(runID)
	at, ok := v.(time.Time)
	return at, ok
}

// prune forgets entries older than age (runs that never reached a
// provider, the stream run), so the map does not grow across phases.
func (a *accepted) prune(age time.Duration) {
	if a == nil {
		return
	}
	cut := time.Now().Add(-age)
	a.m.Range(func(k, v any) bool {
		at, ok := v.(time.Time)
		if !ok {
			at = v.(frameFirst).at
		}
		if at.Before(cut) {
			a.m.Delete(k)
		}
		return true
	})
}

// len counts the entries (tests).
func (a *accepted) len() int {
	n := 0
	a.m.Range(func(any, any) bool { n++; return true })
	return n
}

// acceptHandler records acceptedMsg records into acc and passes every
// record on to inner as before (the ones inner would not take are
// dropped, as they were). It is enabled at Info whatever inner's level,
// so the capture works when the tool's own logging is quieter.
type acceptHandler struct {
	inner slog.Handler
	acc   *accepted
	runID string // a run_id attached with WithAttrs, if any
}

func newAcceptHandler(inner slog.Handler, acc *accepted) *acceptHandler {
	if inner == nil {
		inner = slog.DiscardHandler
	}
	return &acceptHandler{inner: inner, acc: acc}
}

func (h *acceptHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.inner.Enabled(ctx, l)
}

func (h *acceptHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == acceptedMsg && r.Level >= slog.LevelInfo {
		at := time.Now()
		id := h.runID
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "run_id" {
				id = a.Value.String()
				return false
			}
			return true
		})
		if id != "" {
			h.acc.put(id, at)
		}
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *acceptHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.inner = h.inner.WithAttrs(as)
	for _, a := range as {
		if a.Key == "run_id" {
			n.runID = a.Value.String()
		}
	}
	return &n
}

func (h *acceptHandler) WithGroup(name string) slog.Handler {
	n := *h
	n.inner = h.inner.WithGroup(name)
	return &n
}
