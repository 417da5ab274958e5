package broker

import (
	"context"
	"encoding/json"

	"github.com/funduq/funduq-go/core/run"
)

// Limits bound what one provider can make a run hold (issue #10: nothing
// unbounded grows with hostile input). The defaults are config's.
type Limits struct {
	// MaxEventsPerRun caps the events a run stores in one round (a resumed
	// run starts a new round); the event past it fails the run
	// run.ReasonEventLimit.
	MaxEventsPerRun int
	// MaxEventBytes caps one AG-UI event's JSON; a larger one fails the run
	// run.ReasonEventTooLarge.
	MaxEventBytes int
}

// Defaults of Limits (config.DefaultBrokerLimits).
const (
	DefaultMaxEventsPerRun = 100000
	DefaultMaxEventBytes   = 1 << 20
)

func (l *Limits) defaults() {
	if l.MaxEventsPerRun <= 0 {
		l.MaxEventsPerRun = DefaultMaxEventsPerRun
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultMaxEventBytes
	}
}

// overLimit reports whether ev would break the run's limits and, when it
// would, fails the run with the reason naming the limit (a terminal
// RUN_ERROR is synthesized, as for a malformed event) instead of storing
// it. The lane's relay calls it first, before ev is even parsed.
func (l *lane) overLimit(ctx context.Context, ev json.RawMessage) bool {
	lim := l.b.set.Limits
	var reason run.Reason
	switch {
	case len(ev) > lim.MaxEventBytes:
		reason = run.ReasonEventTooLarge
		l.log.WarnContext(ctx, "provider sent an event over the size limit", "bytes", len(ev), "limit", lim.MaxEventBytes)
	case len(l.events) >= lim.MaxEventsPerRun:
		reason = run.ReasonEventLimit
		l.log.WarnContext(ctx, "provider exceeded the events-per-run limit", "limit", lim.MaxEventsPerRun)
	default:
		return false
	}
	l.fail(ctx, reason, true)
	return true
}
