package broker

import (
	"encoding/json"
	"fmt"

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

// check says which of the run's limits ev would break when it is stored
// after stored events of this round; "" when none. The lane fails the run
// with that reason (a terminal RUN_ERROR is synthesized, as for a malformed
// event) instead of storing ev.
func (lim Limits) check(ev json.RawMessage, stored int) (run.Reason, error) {
	switch {
	case len(ev) > lim.MaxEventBytes:
		return run.ReasonEventTooLarge, fmt.Errorf("an event of %d bytes, over the limit of %d", len(ev), lim.MaxEventBytes)
	case stored >= lim.MaxEventsPerRun:
		return run.ReasonEventLimit, fmt.Errorf("more than %d events in one round", lim.MaxEventsPerRun)
	}
	return "", nil
}
