package broker

import (
	"encoding/json"
	"fmt"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
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
	// Register bounds one register (checkRegister).
	Register RegisterLimits
	// MaxServedAgents caps the agents the roster serves at once, over every
	// key (Broker.placesLocked): a register that would add agents past it
	// is refused, and nothing served is withdrawn for it.
	MaxServedAgents int
}

// RegisterLimits bound what one register may make funduq keep and list to
// every caller (design.md §The provider wire): POST /tickets admits anyone,
// so without them a stranger's key registers whatever fits in a frame.
type RegisterLimits struct {
	MaxAgents           int // agents in one register
	MaxDescriptionBytes int // one agent's description
	MaxCardBytes        int // one agent's agentCardExtra, and its metadata, each
	MaxTotalBytes       int // the register's agents in all
}

// MaxProviderNameBytes caps register's providerName, a display label.
const MaxProviderNameBytes = 256

// Defaults of Limits (config.DefaultBrokerLimits).
const (
	DefaultMaxEventsPerRun          = 100000
	DefaultMaxEventBytes            = 1 << 20
	DefaultMaxAgentsPerRegister     = 256
	DefaultMaxAgentDescriptionBytes = 16 << 10
	DefaultMaxAgentCardBytes        = 64 << 10
	DefaultMaxRegisterBytes         = 1 << 20
	DefaultMaxServedAgents          = 100000
)

func (l *Limits) defaults() {
	if l.MaxEventsPerRun <= 0 {
		l.MaxEventsPerRun = DefaultMaxEventsPerRun
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultMaxEventBytes
	}
	if l.MaxServedAgents <= 0 {
		l.MaxServedAgents = DefaultMaxServedAgents
	}
	r := &l.Register
	for _, v := range []struct {
		p *int
		d int
	}{
		{&r.MaxAgents, DefaultMaxAgentsPerRegister}, {&r.MaxDescriptionBytes, DefaultMaxAgentDescriptionBytes},
		{&r.MaxCardBytes, DefaultMaxAgentCardBytes}, {&r.MaxTotalBytes, DefaultMaxRegisterBytes},
	} {
		if *v.p <= 0 {
			*v.p = v.d
		}
	}
}

// checkRegister refuses a register past one of lim, naming the limit and
// the setting that raises it; nil when within all of them.
func (lim RegisterLimits) checkRegister(agents []wire.Registration, providerName string) error {
	if len(agents) > lim.MaxAgents {
		return &RegisterError{fmt.Sprintf("register carries %d agents, over the limit of %d (FUNDUQ_MAX_AGENTS_PER_REGISTER)", len(agents), lim.MaxAgents)}
	}
	if len(providerName) > MaxProviderNameBytes {
		return &RegisterError{fmt.Sprintf("providerName is %d bytes, over the limit of %d", len(providerName), MaxProviderNameBytes)}
	}
	total := 0
	for i, a := range agents {
		// The name is bounded by its pattern (wire.AgentNamePattern).
		if len(a.Description) > lim.MaxDescriptionBytes {
			return &RegisterError{fmt.Sprintf("agents[%d].description is %d bytes, over the limit of %d (FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES)",
				i, len(a.Description), lim.MaxDescriptionBytes)}
		}
		for _, doc := range []struct {
			field string
			raw   json.RawMessage
		}{{"agentCardExtra", a.AgentCardExtra}, {"metadata", a.Metadata}} {
			if len(doc.raw) > lim.MaxCardBytes {
				return &RegisterError{fmt.Sprintf("agents[%d].%s is %d bytes, over the limit of %d (FUNDUQ_MAX_AGENT_CARD_BYTES)",
					i, doc.field, len(doc.raw), lim.MaxCardBytes)}
			}
		}
		total += len(a.Name) + len(a.Description) + len(a.AgentCardExtra) + len(a.Metadata)
	}
	if total > lim.MaxTotalBytes {
		return &RegisterError{fmt.Sprintf("register's agents are %d bytes in all, over the limit of %d (FUNDUQ_MAX_REGISTER_BYTES)", total, lim.MaxTotalBytes)}
	}
	return nil
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
