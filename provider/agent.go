package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/funduq/funduq-go/core/strictjson"
	"github.com/funduq/funduq-go/core/wire"
)

// Handler runs one accepted run. It reports through run.Emit and ends the run
// by returning: the client then sends finish (after a RUN_ERROR carrying the
// error's text if it returned an error and emitted no terminal event). The
// caller sees that text, so keep secrets out of it. A panic is recovered and
// ends the run the same way ("handler panicked: <value>"), logged as an error
// with its stack. A handler that returns nil without having emitted
// RUN_FINISHED or RUN_ERROR leaves funduq to fail the run
// (provider_stream_ended_without_finishing); the client logs a warning. ctx is
// cancelled when funduq asks to cancel the run (context.Cause is
// ErrCancelRequested), when funduq says it no longer holds the run
// (ErrRunNotHeld) or when Client.Run's context ends.
type Handler func(ctx context.Context, run *Run) error

// Agent is one agent the client serves, as registered with funduq.
type Agent struct {
	// Name is the agent's name: 1–128 of [A-Za-z0-9_-].
	Name string
	// Description is shown on the agent card.
	Description string
	// AgentCardExtra is an optional JSON object merged into the agent card
	// (skills and the like).
	AgentCardExtra json.RawMessage
	// Metadata is an optional JSON object stored with the registration.
	Metadata json.RawMessage
	// Handler runs the agent's runs.
	Handler Handler
}

// checkAgents validates the roster and builds the register entries.
func checkAgents(agents []Agent) (map[string]*Agent, []wire.Registration, error) {
	if len(agents) == 0 {
		return nil, nil, errors.New("provider: Config.Agents must name at least one agent")
	}
	byName := make(map[string]*Agent, len(agents))
	regs := make([]wire.Registration, 0, len(agents))
	for i := range agents {
		a := agents[i]
		if !wire.AgentNamePattern.MatchString(a.Name) {
			return nil, nil, fmt.Errorf("provider: agent name %q must be 1-128 of [A-Za-z0-9_-]", a.Name)
		}
		if _, dup := byName[a.Name]; dup {
			return nil, nil, fmt.Errorf("provider: agent %q is listed twice", a.Name)
		}
		if a.Handler == nil {
			return nil, nil, fmt.Errorf("provider: agent %q has no Handler", a.Name)
		}
		for _, f := range []struct {
			field string
			raw   json.RawMessage
		}{{"AgentCardExtra", a.AgentCardExtra}, {"Metadata", a.Metadata}} {
			if len(f.raw) > 0 && !isJSONObject(f.raw) {
				return nil, nil, fmt.Errorf("provider: agent %q: %s must be a JSON object", a.Name, f.field)
			}
			// funduq refuses such a register for good (jsonb cannot hold
			// it): refused here rather than retried forever by Run.
			if why := strictjson.Unstorable(f.raw); len(f.raw) > 0 && why != "" {
				return nil, nil, fmt.Errorf("provider: agent %q: %s %s, which funduq cannot store", a.Name, f.field, why)
			}
		}
		if strings.ContainsRune(a.Description, 0) {
			return nil, nil, fmt.Errorf("provider: agent %q: Description holds a NUL character, which funduq cannot store", a.Name)
		}
		byName[a.Name] = &a
		regs = append(regs, wire.Registration{
			Name:           a.Name,
			Description:    a.Description,
			AgentCardExtra: a.AgentCardExtra,
			Metadata:       a.Metadata,
		})
	}
	return byName, regs, nil
}

// isJSONObject reports whether raw is one valid JSON object.
func isJSONObject(raw []byte) bool {
	if !json.Valid(raw) {
		return false
	}
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}
