package door

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/strictjson"
)

// The admission steps both doors take, each door in its own order
// (docs/design.md §The doors): the caller's bag and its KYOK opt-in, the
// caller, the thread named, the Idempotency-Key and the retry keys, and
// the create with its error mapping.

// IdempotencyHeader names the header a retried POST repeats (D13).
const IdempotencyHeader = "Idempotency-Key"

const maxIdempotencyKey = 255

// Bag is a caller's bag as admitted: the KYOK opt-in's context taken out
// of it (it is for the LLM provider alone, so it leaves the bag before
// anything is stored or relayed, and travels sealed with the run).
type Bag struct {
	CallerBag
	// Raw is the bag without the KYOK context.
	Raw  json.RawMessage
	kyok kyok.OptIn
	// sealable: the bag opted in to KYOK with a context to seal.
	sealable bool
}

// RefuseUnstorable is the refusal of a caller's JSON (field names it in
// the message) holding what funduq cannot carry (strictjson.Unstorable: a
// lone surrogate escape, an escaped NUL, a number past PostgreSQL's
// numeric), in a key or a value at any depth: 400 bad_request naming the
// reason (A2A -32602); nil when raw holds none.
//
// The doors ask it of what they decode and relay — the caller's bag and
// its messages — before reading them: Go reads a lone surrogate as U+FFFD,
// so a key (or an A2A text) holding one would be stored and relayed as
// text the caller never sent. A value is refused alike: the bag is kept in
// jsonb, which holds none of the three, and funduq stores no provider
// event holding them (D18), so an agent echoing such a message would have
// its run failed malformed_event.
func RefuseUnstorable(raw json.RawMessage, field string) *Error {
	if why := strictjson.Unstorable(raw); why != "" {
		return Refuse(http.StatusBadRequest, CodeBadRequest,
			"%s cannot be stored: it %s (in a key or a value)", field, why)
	}
	return nil
}

// ReadBag reads a caller's bag (field names it in messages), taking a KYOK
// opt-in's context out first. A bag holding what funduq cannot carry is
// refused before it is read (RefuseUnstorable), whether or not the thread
// it names is new.
func ReadBag(raw json.RawMessage, field string) (Bag, error) {
	if e := RefuseUnstorable(raw, field); e != nil {
		return Bag{}, e
	}
	opt, ok, _ := kyok.ParseOptIn(raw)
	if ok {
		raw = kyok.StripContext(raw)
	}
	cb, err := ReadCallerBag(raw, field)
	return Bag{CallerBag: cb, Raw: raw, kyok: opt, sealable: ok}, err
}

// SealKyok is the opt-in's binding sealed for the run's row; nil when the
// bag opted in to nothing.
func (b Bag) SealKyok(secret []byte) (*store.KyokBindingRow, error) {
	if b.Kyok == nil || !b.sealable {
		return nil, nil
	}
	sealed, err := kyok.Seal(secret, b.kyok.Binding())
	if err != nil {
		return nil, err
	}
	return &store.KyokBindingRow{LLMProviderKey: b.Kyok.ProviderKey, LLMName: b.Kyok.Name, Sealed: sealed}, nil
}

// Caller is who sends a request: the caller key (authorizer seat or
// presenter proof, D12), which scopes its idempotency keys (D17), and the
// actor chain it presents, if any.
type Caller struct {
	Key   string
	Chain *identity.Chain
	// Stale, for a caller with no key, is the key of a presenter proof
	// gone stale (StalePresenterKey): no authority, only the scope
	// RefuseStaleRetry looks the request up in.
	Stale string
}

// Head is the chain's head ("" without a chain).
func (c Caller) Head() string {
	if c.Chain == nil {
		return ""
	}
	return c.Chain.Head()
}

// ReadCaller finds the request's caller key and checks the bag's actor
// chain against it (VerifyCaller).
func ReadCaller(r *http.Request, body []byte, authorized func(*http.Request) string, now time.Time, bag Bag) (Caller, error) {
	key := CallerKey(r, body, authorized, now)
	chain, err := VerifyCaller(bag.CallerBag, key)
	c := Caller{Key: key, Chain: chain}
	if key == "" && err == nil {
		c.Stale = StalePresenterKey(r, body, now)
	}
	return c, err
}

// MayWrite reports whether a caller whose chain is headed by head may add
// a turn to thread th of agent: an unbound thread takes anyone's, a bound
// one its head's or the agent's provider's (D12).
func MayWrite(th store.Thread, agent store.Agent, head string) bool {
	return th.HeadKey == "" || head == th.HeadKey || head == agent.ProviderKey
}

// CheckThread refuses a turn on thread th: 409 thread_ownership_mismatch
// when it is another agent's, 403 thread_membership_required when it is
// bound to an authority that does not head the caller's chain. noun names
// the thread in messages ("thread", "context"); bound says more of the
// authority ("" or " (…)").
func CheckThread(th store.Thread, agent store.Agent, head, noun, bound string) error {
	if th.ProviderKey != agent.ProviderKey || th.AgentName != agent.Name {
		return mismatch(noun, th.ThreadID)
	}
	if !MayWrite(th, agent, head) {
		return Refuse(http.StatusForbidden, CodeMembershipRequired,
			"%s %s is bound to an authority%s; present a chain headed by it", noun, th.ThreadID, bound)
	}
	return nil
}

func mismatch(noun, threadID string) error {
	return Refuse(http.StatusConflict, CodeThreadMismatch, "%s %s belongs to another agent", noun, threadID)
}

// IdempotencyKey is the request's Idempotency-Key (D13); 400 bad_request
// unless it is at most 255 bytes of UTF-8, none of them a control
// character. It is kept as text, which PostgreSQL refuses in other bytes
// (a Latin-1 header value): refused here, the refusal names the header.
func IdempotencyKey(r *http.Request) (string, error) {
	idem := r.Header.Get(IdempotencyHeader)
	if len(idem) > maxIdempotencyKey || !utf8.ValidString(idem) ||
		strings.ContainsFunc(idem, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return "", Refuse(http.StatusBadRequest, CodeBadRequest,
			"%s must be at most %d bytes of UTF-8, none of them a control character", IdempotencyHeader, maxIdempotencyKey)
	}
	return idem, nil
}

// Probe is a request's retry look-up (D17), the new run's keys too: the
// Idempotency-Key idem within the caller key, compared with the request's
// hash, and requestID (the caller's own id of the request). A turn that
// opens a thread and carries no Idempotency-Key is matched, for a known
// caller only, by firstTurn ("" for none): an anonymous caller's ids are
// identifiers, not credentials (D16), and anyone sending the same request
// would be handed this caller's new thread.
func Probe(agent store.Agent, thread *store.Thread, c Caller, idem, requestID, hash, firstTurn string) store.NewRun {
	p := store.NewRun{ProviderKey: agent.ProviderKey, AgentName: agent.Name,
		IdempotencyKey: IdempotencyScope(c.Key, idem), CallerRequestID: requestID, RequestHash: hash}
	if thread != nil {
		p.ThreadID = thread.ThreadID
		return p
	}
	p.CreateThread = &store.NewThread{}
	if idem == "" && c.Key != "" && firstTurn != "" {
		p.IdempotencyKey = IdempotencyScope(c.Key, firstTurn)
	}
	return p
}

// ReusedKey maps store.ErrKeyReused to its 422, naming the Idempotency-Key
// when idem was sent and else the caller's request id (what: "this
// runId"); other errors pass.
func ReusedKey(err error, idem, what string) error {
	if !errors.Is(err, store.ErrKeyReused) {
		return err
	}
	if idem != "" {
		return KeyReused("this " + IdempotencyHeader)
	}
	return KeyReused(what)
}

// NewTurn is a new run for Create: the probe it extends, the ids, the
// built input, and what a thread it opens holds.
type NewTurn struct {
	Agent                        store.Agent
	Probe                        store.NewRun // from Probe
	Built                        runinput.Built
	Bag                          Bag
	Caller                       Caller
	RunID, ThreadID, ParentRunID string
	// ParentThreadID parents the thread the turn opens (A2A lineage).
	ParentThreadID string
	// Idem and What name the key in a reuse refusal (ReusedKey); Noun the
	// thread in a mismatch (CheckThread).
	Idem, What, Noun string
	TokenSecret      []byte // seals the KYOK binding
	MaxQueued        int    // config.DoorLimits.MaxQueuedPerThread
}

// Create queues the new run on its thread (D2: the broker sequences it),
// opening the thread when the probe does, with the KYOK binding sealed, in
// one store.Admit; its refusals are the doors' typed errors.
func Create(ctx context.Context, st *store.Store, t NewTurn) (store.Admitted, error) {
	nr := t.Probe
	nr.RunID, nr.ThreadID, nr.RunInput, nr.ParentRunID = t.RunID, t.ThreadID, t.Built.Bytes, t.ParentRunID
	nr.AddressedRunID = t.Built.AddressedRunID
	if t.Built.RelayedChain != nil {
		nr.ActorChain, _ = json.Marshal(t.Built.RelayedChain)
	}
	if nr.CreateThread != nil {
		nr.CreateThread = &store.NewThread{ParentThreadID: t.ParentThreadID, HeadKey: t.Caller.Head(), Metadata: t.Bag.Metadata()}
		if t.Caller.Chain != nil {
			nr.CreateThread.PresenterKey = t.Caller.Key
		}
	}
	nr.Messages = Messages(t.Built)
	kb, err := t.Bag.SealKyok(t.TokenSecret)
	if err != nil {
		return store.Admitted{}, err
	}
	nr.Kyok = kb
	nr.MaxQueued = t.MaxQueued
	ctx, cancel := Step(ctx)
	defer cancel()
	adm, err := st.Admit(ctx, nr)
	if errors.Is(err, store.ErrKeyReused) {
		return adm, ReusedKey(err, t.Idem, t.What)
	}
	if errors.Is(err, store.ErrThreadMismatch) {
		return adm, mismatch(t.Noun, t.ThreadID)
	}
	if err != nil {
		return adm, AgentGone(err, t.Agent)
	}
	return adm, nil
}

// FindRetried is store.FindRetriedRun as one step of a request (Step).
func FindRetried(ctx context.Context, st *store.Store, probe store.NewRun) (store.Retried, bool, error) {
	ctx, cancel := Step(ctx)
	defer cancel()
	return st.FindRetriedRun(ctx, probe)
}

// Messages are a built input's messages as stored with the run.
func Messages(b runinput.Built) []store.Message {
	out := make([]store.Message, len(b.MessageIDs))
	for i, id := range b.MessageIDs {
		out[i] = store.Message{MessageID: id, Message: b.Input.Messages[i]}
	}
	return out
}
