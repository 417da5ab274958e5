package runinput

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/strictjson"
)

// FunduqKey is the reserved forwardedProps key: the only key funduq writes
// into a caller's bag, and one a caller may not set.
const FunduqKey = "funduq"

// ErrInvalid is matched by every error Build returns for bad caller input.
var ErrInvalid = errors.New("invalid run input")

// Input is an AG-UI RunAgentInput exactly as funduq emits it: every key, in
// this order, nulls included.
type Input struct {
	ThreadID       string            `json:"threadId"`
	RunID          string            `json:"runId"`
	ParentRunID    *string           `json:"parentRunId"`
	State          json.RawMessage   `json:"state"`
	Messages       []json.RawMessage `json:"messages"`
	Tools          []json.RawMessage `json:"tools"`
	Context        []json.RawMessage `json:"context"`
	ForwardedProps json.RawMessage   `json:"forwardedProps"`
	Resume         json.RawMessage   `json:"resume"`
}

// Bytes is the input's wire form: compact JSON, no HTML escaping.
func (in Input) Bytes() (json.RawMessage, error) { return marshal(in) }

// Dispatch names where the run goes and who signs the dispatch hop.
type Dispatch struct {
	Funduq      *identity.Signer // funduq's identity; signs the dispatch hop
	ProviderKey string
	AgentName   string
}

// Request is what a door hands the builder.
type Request struct {
	ThreadID    string // funduq's thread id
	RunID       string // funduq's run id
	ParentRunID string // "" → null
	State       json.RawMessage
	// Messages are this run's own messages as the caller sent them; each
	// is given a fresh funduq message id (see Built.MessageIDs).
	Messages       []json.RawMessage
	Tools          []json.RawMessage
	Context        []json.RawMessage
	ForwardedProps json.RawMessage // the caller's bag, verbatim (any JSON, or empty)
	Resume         json.RawMessage

	// Chain is the caller's verified actor chain; nil when none was presented.
	Chain *identity.Chain
	// Dispatch is required when Chain is set: funduq appends its hop.
	Dispatch Dispatch
	// KyokToken, when set, is the run's KYOK grant.
	KyokToken string
	// AddressedRunID names the live run an interjection addresses.
	AddressedRunID string

	// NewMessageID mints message ids; nil uses run.NewMessageID.
	NewMessageID func() string
}

// Built is the builder's result.
type Built struct {
	Input      Input
	Bytes      json.RawMessage // Input's wire form, what the run row stores
	MessageIDs []string        // the ids given to Request.Messages, in order
	// RelayedChain is the chain as relayed (caller hops + dispatch hop); nil
	// without a chain.
	RelayedChain []string
	// AddressedRunID is Request.AddressedRunID, which Bytes carries under
	// forwardedProps.funduq.addressedRunId; the door stores it beside the
	// input (store.NewRun.AddressedRunID) so nobody parses it back out.
	AddressedRunID string
}

// Caller is forwardedProps.funduq.caller: the verified chain's summary.
type Caller struct {
	HeadKey      string `json:"headKey"`
	PresenterKey string `json:"presenterKey"`
	Hops         int    `json:"hops"`
}

type kyokGrant struct {
	Token string `json:"token"`
}

// Build makes the RunAgentInput for one run. It is deterministic: the same
// request yields the same bytes.
func Build(req Request) (Built, error) {
	if req.ThreadID == "" || req.RunID == "" {
		return Built{}, fmt.Errorf("%w: thread id and run id are required", ErrInvalid)
	}
	newID := req.NewMessageID
	if newID == nil {
		newID = run.NewMessageID
	}
	in := Input{ThreadID: req.ThreadID, RunID: req.RunID,
		Messages: []json.RawMessage{}, Tools: []json.RawMessage{}, Context: []json.RawMessage{}}
	if req.ParentRunID != "" {
		p := req.ParentRunID
		in.ParentRunID = &p
	}
	var err error
	if in.State, err = compact(req.State); err != nil {
		return Built{}, fmt.Errorf("%w: state: %v", ErrInvalid, err)
	}
	if in.Resume, err = compact(req.Resume); err != nil {
		return Built{}, fmt.Errorf("%w: resume: %v", ErrInvalid, err)
	}
	// Relayed as sent or not at all, like the messages and the bag: funduq
	// stores no event holding what it cannot carry (design.md D18), so an
	// agent echoing them would have its run failed.
	for _, v := range []struct {
		name string
		raw  json.RawMessage
	}{{"state", in.State}, {"resume", in.Resume}} {
		if why := strictjson.Unstorable(v.raw); why != "" {
			return Built{}, fmt.Errorf("%w: %s %s (in a key or a value), which funduq does not carry", ErrInvalid, v.name, why)
		}
	}
	var out Built
	for i, m := range req.Messages {
		id := newID()
		nm, err := NormalizeMessage(m, id)
		if err != nil {
			return Built{}, fmt.Errorf("%w: messages[%d]: %v", ErrInvalid, i, err)
		}
		in.Messages = append(in.Messages, nm)
		out.MessageIDs = append(out.MessageIDs, id)
	}
	for _, list := range []struct {
		name string
		src  []json.RawMessage
		dst  *[]json.RawMessage
	}{{"tools", req.Tools, &in.Tools}, {"context", req.Context, &in.Context}} {
		for i, v := range list.src {
			if _, err := parseObject(v); err != nil {
				return Built{}, fmt.Errorf("%w: %s[%d]: %v", ErrInvalid, list.name, i, err)
			}
			c, _ := compact(v)
			if why := strictjson.Unstorable(c); why != "" {
				return Built{}, fmt.Errorf("%w: %s[%d] %s (in a key or a value), which funduq does not carry", ErrInvalid, list.name, i, why)
			}
			*list.dst = append(*list.dst, c)
		}
	}

	// funduq's additions, in a fixed order.
	var add object
	if req.Chain != nil {
		d := req.Dispatch
		if d.Funduq == nil || d.ProviderKey == "" || d.AgentName == "" {
			return Built{}, errors.New("run input: a chain needs the dispatch signer, provider key and agent name")
		}
		relayed, err := identity.AppendDispatchHop(*req.Chain, d.Funduq, d.ProviderKey, d.AgentName)
		if err != nil {
			return Built{}, fmt.Errorf("run input: dispatch hop: %w", err)
		}
		out.RelayedChain = relayed.Tokens()
		caller, _ := marshal(Caller{HeadKey: req.Chain.Head(), PresenterKey: req.Chain.Presenter(), Hops: req.Chain.Len()})
		chain, _ := marshal(out.RelayedChain)
		add = append(add, member{"caller", caller}, member{"actorChain", chain})
	}
	if req.KyokToken != "" {
		k, _ := marshal(kyokGrant{Token: req.KyokToken})
		add = append(add, member{"kyok", k})
	}
	if req.AddressedRunID != "" {
		a, _ := marshal(req.AddressedRunID)
		add = append(add, member{"addressedRunId", a})
	}
	if in.ForwardedProps, err = forwardedProps(req.ForwardedProps, add); err != nil {
		return Built{}, err
	}

	b, err := in.Bytes()
	if err != nil {
		return Built{}, fmt.Errorf("run input: encode: %w", err)
	}
	out.Input, out.Bytes, out.AddressedRunID = in, b, req.AddressedRunID
	return out, nil
}

// forwardedProps is the caller's bag minus any "funduq" key, with funduq's
// additions under "funduq" when there are any. A bag that is not an object
// passes through untouched when funduq adds nothing, and is replaced by
// {"funduq": …} when it does. A bag holding what funduq cannot carry is
// refused, never rewritten (NormalizeMessage says why).
func forwardedProps(caller json.RawMessage, add object) (json.RawMessage, error) {
	c, err := compact(caller)
	if err != nil {
		return nil, fmt.Errorf("%w: forwardedProps: %v", ErrInvalid, err)
	}
	if why := strictjson.Unstorable(c); why != "" {
		return nil, fmt.Errorf("%w: forwardedProps %s (in a key or a value), which funduq does not carry", ErrInvalid, why)
	}
	obj, err := parseObject(c)
	isObject := err == nil
	if !isObject && !errors.Is(err, errNotObject) {
		return nil, fmt.Errorf("%w: forwardedProps: %v", ErrInvalid, err)
	}
	if isObject {
		obj = obj.without(FunduqKey)
	}
	if len(add) == 0 {
		if isObject {
			return obj.MarshalJSON()
		}
		return c, nil
	}
	f, err := add.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if !isObject {
		obj = nil
	}
	return append(obj, member{FunduqKey, f}).MarshalJSON()
}
