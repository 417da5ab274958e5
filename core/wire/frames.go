package wire

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// Version is the provider wire this funduq speaks (the hello's "version").
const Version = 4

// Frame types on /ws/provider.
const (
	TypeHello       = "hello"
	TypeWelcome     = "welcome"
	TypeRegister    = "register"
	TypeRegistered  = "registered"
	TypeDeleteAgent = "deleteAgent"
	TypeDeleted     = "deleted"
	TypeRun         = "run"
	TypeAck         = "ack"
	TypeEvent       = "event"
	TypeFinish      = "finish"
	TypeCancel      = "cancel"
	TypeQuery       = "query"
	TypeQueryResult = "queryResult"
	TypeError       = "error"
)

// ProviderInbound and ProviderOutbound are the frame sets after the handshake
// (funduq-server-wire-vectors-v4.json).
var (
	ProviderInbound  = []string{TypeRegister, TypeDeleteAgent, TypeAck, TypeEvent, TypeFinish, TypeQuery}
	ProviderOutbound = []string{TypeWelcome, TypeRun, TypeCancel, TypeRegistered, TypeDeleted, TypeQueryResult, TypeError}
)

// Hello opens a link: the provider's key, its ticket from POST /tickets, a
// fresh nonce and its proof over ProviderConnectPayload. MaxConcurrentRuns
// nil (or absent) declares no limit.
type Hello struct {
	Type              string `json:"type"`
	Version           *int   `json:"version,omitempty"`
	PublicKey         string `json:"publicKey"`
	Ticket            string `json:"ticket"`
	Nonce             string `json:"nonce"`
	Proof             string `json:"proof"`
	MaxConcurrentRuns *int   `json:"maxConcurrentRuns"`
}

// Welcome answers a good hello: funduq's key and its signature over
// FunduqConnectPayload(ticket, nonce).
type Welcome struct {
	Type            string `json:"type"`
	FunduqPublicKey string `json:"funduqPublicKey"`
	Answer          string `json:"answer"`
}

// TicketRequest is POST /tickets' body.
type TicketRequest struct {
	PublicKey string `json:"publicKey"`
}

// TicketResponse is POST /tickets' 201 answer.
type TicketResponse struct {
	Ticket          string `json:"ticket"`
	FunduqPublicKey string `json:"funduqPublicKey"`
}

// Registration is one agent in a register frame (funduq_contract's
// Registration: unknown keys are refused).
type Registration struct {
	Name               string          `json:"name"`
	Description        string          `json:"description"`
	AgentCardExtra     json.RawMessage `json:"agentCardExtra,omitempty"`
	Metadata           json.RawMessage `json:"metadata,omitempty"`
	TakesInterjections bool            `json:"takesInterjections"`
}

// Register carries the full roster this link serves.
type Register struct {
	Type         string         `json:"type"`
	Agents       []Registration `json:"agents"`
	ProviderName string         `json:"providerName,omitempty"`
}

// Registered echoes the names now live, sorted.
type Registered struct {
	Type  string   `json:"type"`
	Names []string `json:"names"`
}

// DeleteAgent removes one agent record; Deleted confirms it.
type DeleteAgent struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// Deleted confirms a deleteAgent.
type Deleted struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// Ack is the provider's three-valued verdict on an offer. Accepted absent
// means true; false with a non-empty reason is a permanent refusal; false
// otherwise is a decline.
type Ack struct {
	Type     string  `json:"type"`
	RunID    string  `json:"runId"`
	Accepted *bool   `json:"accepted,omitempty"`
	Reason   *string `json:"reason,omitempty"`
}

// Verdict is an Ack read.
type Verdict int

const (
	Accepted Verdict = iota + 1
	Declined
	Refused
)

func (v Verdict) String() string {
	switch v {
	case Accepted:
		return "accepted"
	case Declined:
		return "declined"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Verdict reads the ack's answer and, for a refusal, its reason.
func (a Ack) Verdict() (Verdict, string) {
	if a.Accepted == nil || *a.Accepted {
		return Accepted, ""
	}
	if a.Reason != nil && *a.Reason != "" {
		return Refused, *a.Reason
	}
	return Declined, ""
}

// Event carries one AG-UI event of a run. ProviderSeq (the frame's "seq")
// is funduq-go's optional extension (design.md D7): the provider's own
// sequence number, so a resent event is stored once; providers that do
// not send it are unaffected. It is not funduq's seq, the event's place
// in the run's stored record.
type Event struct {
	Type        string          `json:"type"`
	RunID       string          `json:"runId"`
	Event       json.RawMessage `json:"event"`
	ProviderSeq *int64          `json:"seq,omitempty"`
}

// Finish says a run's stream ended.
type Finish struct {
	Type  string `json:"type"`
	RunID string `json:"runId"`
}

// Cancel asks the provider to stop a run; a request, never a command.
type Cancel struct {
	Type  string `json:"type"`
	RunID string `json:"runId"`
}

// Query asks funduq for thread messages (method "thread_messages").
type Query struct {
	Type    string          `json:"type"`
	QueryID string          `json:"queryId"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// ThreadMessagesParams are thread_messages' params.
type ThreadMessagesParams struct {
	ThreadID string `json:"threadId"`
	Limit    *int   `json:"limit,omitempty"`
}

// QueryResult answers a query with a result or an error.
type QueryResult struct {
	Type    string          `json:"type"`
	QueryID string          `json:"queryId"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// Error is funduq's never-fatal complaint about a frame.
type Error struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	RunID   string `json:"runId,omitempty"`
	Name    string `json:"name,omitempty"`
	// Code, on the error answering a register only, says whether sending
	// that register again can help: CodeRegisterRefused or CodeRetryLater
	// (design.md §The provider wire, "Refusal codes"). A member the v4
	// wire did not have, so omitted when empty: a provider reading only
	// message sees nothing change, and one reading code goes by message
	// when it is absent (an older broker) or a value it does not know.
	Code string `json:"code,omitempty"`
}

// The codes an Error may carry, spelt like the HTTP refusals' codes
// (core/apierr).
const (
	// CodeRegisterRefused: no retry of the same register can be
	// answered "registered" (past a register limit, a frame that does
	// not validate, a key whose fingerprint another key holds). The
	// provider changes what it registers, or its key, or the operator a
	// setting.
	CodeRegisterRefused = "register_refused"
	// CodeRetryLater: a refusal of the moment (the served-agents cap, a
	// withdrawn link, funduq's own trouble); the same register sent again
	// later, on a new link where the message says reconnect, may be
	// answered "registered".
	CodeRetryLater = "retry_later"
)

// RegisterRefusal is the error answering a refused register: message, and
// code CodeRegisterRefused or CodeRetryLater.
func RegisterRefusal(code, message string) Error {
	return Error{Type: TypeError, Message: message, Code: code}
}

// AgentNamePattern is the name rule: names go into URL path segments.
var AgentNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// PeekType reads a frame's "type"; ok is false when raw is not a JSON object
// with a string type.
//
// It reads as encoding/json would into a struct with one *string field
// "type" (the last one wins, null unsets it, the whole frame must be valid
// JSON), except that the name is matched exactly (design.md §The provider
// wire, "Exact names"): "TYPE" is not the type. It reads in one pass with
// jsontext that builds nothing: the broker peeks at every frame and every
// event.
func PeekType(raw []byte) (string, bool) {
	h := peek(raw)
	return h.typ, h.ok
}

// ReplacedMessage is the message of the error frame funduq sends a link
// that a newer link of its key left serving nothing (design.md §Two
// processes of one key). The wire has no code for it; our SDK reads this
// text to stop instead of registering again (provider.ErrReplaced). funduq
// no longer closes the link after it (it is left open, offered nothing),
// but the text is kept byte for byte: SDKs already built match it exactly.
const ReplacedMessage = "this link was replaced by a newer link of the same key and serves nothing now; closing it"

// TakenMessage is the message of the error frame, naming an agent
// (`name`), that funduq sends a link when another link of its key
// registered that agent and serves it now, while this link goes on serving
// its other agents (design.md §Two processes of one key). A link left
// serving nothing is told ReplacedMessage instead. Our SDK leaves a name so
// taken out of its later registers until it is told FreedMessage for it;
// a provider that ignores the frame behaves as before (its next register
// takes the name back).
const TakenMessage = "another link of the same key registered this agent and serves it now; this link no longer serves it"

// FreedMessage is the message of the error frame, naming an agent, that
// funduq sends every other registered link of a key when an agent that
// was taken from one of its links (TakenMessage) is served by no link any
// more: its serving link closed, dropped it from a register, or deleted
// it. A link that still declares the agent may register it again; our SDK
// does.
const FreedMessage = "no link of this key serves this agent now; register it again to serve it"

// QueryBusyMessage and QueryUnreadMessage are the errors of a queryResult
// that says "ask again": the query waited its whole time limit for the
// broker's query budget, or its read ran out of time (design.md §The
// provider wire). The wire has no code for them; our SDK reads these texts
// to tell them from a refusal (provider.ErrQueryAskAgain).
const (
	QueryBusyMessage   = "funduq is answering too many queries right now; ask again"
	QueryUnreadMessage = "funduq could not read the thread right now"
)
