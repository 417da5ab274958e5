package door

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
)

// The caller's side of a run, shared by the doors that start runs: the bag
// (AG-UI forwardedProps, A2A request metadata), the presenter seats (D12),
// the actor chain check, and the KYOK opt-in check.

// Error codes added with the A2A door.
const (
	CodeInvalidCancel  = "invalid_cancel"
	CodeTaskNotFound   = "task_not_found"
	CodeNotCancellable = "not_cancellable"
)

// CallerBag is what a door reads from the caller's bag when it is an object.
type CallerBag struct {
	IsObject   bool
	Obj        map[string]json.RawMessage
	ActorChain json.RawMessage // nil when absent or null
	Kyok       *KyokOptIn
}

// KyokOptIn names the LLM offering a caller opted in to (bag key
// kyok.llmProvider).
type KyokOptIn struct {
	ProviderKey string
	Name        string
}

func jsonFirstByte(raw []byte) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

func presentMember(obj map[string]json.RawMessage, key string) (json.RawMessage, bool) {
	raw, ok := obj[key]
	if !ok || jsonFirstByte(raw) == 'n' {
		return nil, false
	}
	return raw, true
}

// ReadCallerBag extracts the actor chain and the KYOK opt-in from a bag; a
// bag that is not an object has neither. field names the bag in messages
// ("forwardedProps", "metadata"). Errors are *Error 422 invalid_run_input.
func ReadCallerBag(raw json.RawMessage, field string) (CallerBag, error) {
	var b CallerBag
	if jsonFirstByte(raw) != '{' {
		return b, nil
	}
	if err := json.Unmarshal(raw, &b.Obj); err != nil {
		return b, Refuse(http.StatusUnprocessableEntity, CodeInvalidRunInput, "%s: %v", field, err)
	}
	b.IsObject = true
	if v, ok := presentMember(b.Obj, "actorChain"); ok {
		b.ActorChain = v
	}
	if v, ok := presentMember(b.Obj, "kyok"); ok {
		var k map[string]json.RawMessage
		if jsonFirstByte(v) != '{' || json.Unmarshal(v, &k) != nil {
			return b, Refuse(http.StatusUnprocessableEntity, CodeInvalidRunInput, "%s.kyok must be an object", field)
		}
		// A declaration naming no offering opts in to nothing, and its
		// context (the caller's LLM credentials, sealed only with an
		// opt-in) would reach the agent's provider in the clear.
		lp, ok := presentMember(k, "llmProvider")
		if !ok {
			return b, Refuse(http.StatusUnprocessableEntity, CodeInvalidRunInput,
				"%s.kyok must name its offering: kyok.llmProvider = {providerKey, name}", field)
		}
		var opt struct {
			ProviderKey *string `json:"providerKey"`
			Name        *string `json:"name"`
		}
		if jsonFirstByte(lp) != '{' || json.Unmarshal(lp, &opt) != nil || opt.ProviderKey == nil || opt.Name == nil ||
			*opt.ProviderKey == "" || *opt.Name == "" {
			return b, Refuse(http.StatusUnprocessableEntity, CodeInvalidRunInput,
				"%s.kyok.llmProvider must be {providerKey, name} with non-empty strings", field)
		}
		b.Kyok = &KyokOptIn{ProviderKey: *opt.ProviderKey, Name: *opt.Name}
	}
	return b, nil
}

// Metadata is the bag without funduq's reserved key, as stored on a new
// thread; nil when the bag is not an object.
func (b CallerBag) Metadata() json.RawMessage {
	if !b.IsObject {
		return nil
	}
	m := make(map[string]json.RawMessage, len(b.Obj))
	for k, v := range b.Obj {
		if k != "funduq" {
			m[k] = v
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return out
}

// PresenterKey is the authenticated key presenting a request (D12): the
// authorizer's seat first (authorized may be nil), then a valid
// Funduq-Presenter proof over the exact body. "" when neither proves a key.
func PresenterKey(r *http.Request, body []byte, authorized func(*http.Request) string, now time.Time) string {
	if authorized != nil {
		if k := authorized(r); identity.IsPublicKeyHex(k) {
			return k
		}
	}
	if v := r.Header.Get(identity.PresenterHeader); v != "" {
		if k, err := identity.ParsePresenterHeader(v, body, now); err == nil {
			return k
		}
	}
	return ""
}

// VerifyCaller checks the bag's actor chain against the presenter (seed
// 001, rev 21: the presenter must sign the chain's last hop). nil, nil when
// the bag carries no chain. Errors are *Error 401 presenter_required or
// invalid_chain.
func VerifyCaller(bag CallerBag, presenter string) (*identity.Chain, error) {
	if bag.ActorChain == nil {
		return nil, nil
	}
	if presenter == "" {
		return nil, Refuse(http.StatusUnauthorized, CodePresenterRequired,
			"an actor chain needs an authenticated presenter key (an authorizer, or the %s header)", identity.PresenterHeader)
	}
	var toks []string
	if jsonFirstByte(bag.ActorChain) != '[' || json.Unmarshal(bag.ActorChain, &toks) != nil {
		return nil, Refuse(http.StatusUnauthorized, CodeInvalidChain, "actorChain must be an array of compact JWS strings")
	}
	c, err := identity.VerifyChain(toks)
	if err != nil {
		return nil, Refuse(http.StatusUnauthorized, CodeInvalidChain, "the actor chain does not verify: %v", err)
	}
	if c.Presenter() != presenter {
		return nil, Refuse(http.StatusUnauthorized, CodeInvalidChain, "the presenter is not the signer of the chain's last hop")
	}
	return &c, nil
}

// CheckKyokOptIn refuses an opt-in naming an unregistered LLM offering
// (*Error 404 llm_provider_not_found).
func CheckKyokOptIn(ctx context.Context, st *store.Store, opt *KyokOptIn) error {
	if opt == nil {
		return nil
	}
	ctx, cancel := Step(ctx)
	defer cancel()
	ok, err := st.LLMOfferingExists(ctx, opt.ProviderKey, opt.Name)
	if err != nil {
		return err
	}
	if !ok {
		return Refuse(http.StatusNotFound, CodeLLMNotFound, "no LLM offering %s is registered by %s", opt.Name, opt.ProviderKey)
	}
	return nil
}

// FindAgent resolves the agent a door path names ({provider} is the 64-hex
// key or the 16-hex fingerprint). Errors: *Error 404 agent_not_found, or a
// storage error.
func FindAgent(ctx context.Context, st *store.Store, provider, name string) (store.Agent, error) {
	if !identity.IsPublicKeyHex(provider) && !identity.IsFingerprint(provider) {
		return store.Agent{}, Refuse(http.StatusNotFound, CodeAgentNotFound,
			"no agent %s/%s: the provider is its 64-hex public key or 16-hex fingerprint", provider, name)
	}
	fctx, cancel := Step(ctx)
	defer cancel()
	a, err := st.FindAgent(fctx, provider, name)
	if err != nil {
		if isNotFound(err) {
			return store.Agent{}, Refuse(http.StatusNotFound, CodeAgentNotFound, "no agent %s is registered by %s", name, provider)
		}
		return store.Agent{}, err
	}
	return a, nil
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// CancelProof is a signed cancel request (metadata.cancel): Ed25519 by
// PublicKey over funduq-cancel:{run_id}:{timestamp}.
type CancelProof struct {
	PublicKey string `json:"publicKey"`
	Timestamp int64  `json:"timestamp"`
	Signature string `json:"signature"`
}

// CheckCancelProof verifies a cancel proof for runID against the keys
// allowed to cancel it; it returns the signer. Errors are *Error 401
// invalid_cancel; nothing in them says anything about the run's state.
func CheckCancelProof(raw json.RawMessage, runID string, allowed []string, now time.Time) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", Refuse(http.StatusUnauthorized, CodeInvalidCancel, format, args...)
	}
	if jsonFirstByte(raw) != '{' {
		return bad("this task's thread is bound to an authority: a cancel needs metadata.cancel = {publicKey, timestamp, signature} signed over %s", fmt.Sprintf("funduq-cancel:%s:{timestamp}", runID))
	}
	var p CancelProof
	if err := json.Unmarshal(raw, &p); err != nil {
		return bad("metadata.cancel must be {publicKey: 64-hex string, timestamp: integer unix seconds, signature: 128-hex string}")
	}
	pub, err := identity.ParsePublicKey(p.PublicKey)
	if err != nil {
		return bad("metadata.cancel.publicKey: %v", err)
	}
	if err := identity.CheckFresh(p.Timestamp, now, identity.FreshnessWindow); err != nil {
		return bad("metadata.cancel.timestamp: %v", err)
	}
	if err := identity.Verify(pub, identity.CancelPayload(runID, p.Timestamp), p.Signature); err != nil {
		return bad("metadata.cancel.signature does not verify")
	}
	for _, k := range allowed {
		if k != "" && k == p.PublicKey {
			return p.PublicKey, nil
		}
	}
	return bad("the cancel is signed by a key that is neither the segment head nor the agent's provider")
}
