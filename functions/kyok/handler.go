package kyok

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/strictjson"
	"github.com/funduq/funduq-go/functions/door"
)

// Header names (they kept the reference's old "souk" name in wire v4).
const (
	HeaderTimestamp = "X-Souk-Kyok-Timestamp"
	HeaderSignature = "X-Souk-Kyok-Signature"
)

// Path is the route this door serves.
const Path = "/kyok/v1/chat/completions"

// Patterns are the ServeMux patterns to mount the Handler on.
func Patterns() []string { return []string{"POST " + Path} }

// FreshWindow is how far a call's timestamp may be from now.
const FreshWindow = 60 * time.Second

// Options are what the door needs.
type Options struct {
	Store *store.Store
	Redis *redis.Client
	// Prefix is the deployment's Redis key prefix (config Storage.RedisPrefix).
	Prefix string
	// TokenSecret is FUNDUQ_TOKEN_SECRET: it verifies tokens and opens
	// bindings.
	TokenSecret []byte
	Log         *slog.Logger
	// Now is the clock (time.Now if nil).
	Now func() time.Time
	// AckTimeout is how long the door waits for the leader to take up a
	// request before answering 503 (5 s).
	AckTimeout time.Duration
	// GapTimeout is the door's own silence detector between replies, a
	// safety net behind the relay's 120 s gap (125 s).
	GapTimeout time.Duration
	// RelaySilence is how long the door hears nothing at all from the
	// relay — not even its keep-alives — before it fails the call as lost
	// (default kyok.KeepAliveSilence).
	RelaySilence time.Duration
	// MaxBody bounds the request body (8 MiB).
	MaxBody int64
	// MaxJSONDepth bounds the body's nesting (config DoorLimits; 64).
	MaxJSONDepth int
	// MaxCollapsed bounds the chunks a non-streaming call holds before it
	// answers (64 MiB); past it the call is 502 llm_answer_too_large.
	MaxCollapsed int
	// StreamMaxLen caps the shared request stream (approximately, 10000).
	StreamMaxLen int64
	// DeadlineMargin is how long before the request's deadline (Lambda's)
	// a call still waiting for its answer ends with a typed failure, so
	// that failure goes out before the function is killed
	// (door.DefaultDeadlineMargin).
	DeadlineMargin time.Duration
}

// Handler is the KYOK door.
type Handler struct{ o Options }

// New builds the door.
func New(o Options) (*Handler, error) {
	if o.Store == nil || o.Redis == nil || len(o.TokenSecret) == 0 {
		return nil, errors.New("kyok door: Store, Redis and TokenSecret are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = 5 * time.Second
	}
	if o.RelaySilence <= 0 {
		o.RelaySilence = kyok.KeepAliveSilence
	}
	if o.GapTimeout <= 0 {
		o.GapTimeout = 125 * time.Second
	}
	if o.DeadlineMargin <= 0 {
		o.DeadlineMargin = door.DefaultDeadlineMargin
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 8 << 20
	}
	if o.MaxCollapsed <= 0 {
		o.MaxCollapsed = 64 << 20
	}
	if o.MaxJSONDepth <= 0 {
		o.MaxJSONDepth = strictjson.DefaultMaxDepth
	}
	if o.StreamMaxLen <= 0 {
		o.StreamMaxLen = 10000
	}
	return &Handler{o: o}, nil
}

// apiError is the door's one error envelope.
type apiError struct {
	Status  int
	Code    string
	Message string
	Refusal json.RawMessage
	// Final marks an answer that asking again cannot change (the LLM
	// provider's structured refusal, an answer too large to collapse): it
	// carries X-Should-Retry: false, which the official OpenAI clients
	// obey over their default retry of every 5xx.
	Final bool
	// RetryAfter, when positive, is the Retry-After a 503 or 429 carries
	// (1 otherwise).
	RetryAfter int
	Err        error // logs only
}

func refuse(status int, code, msg string) *apiError {
	return &apiError{Status: status, Code: code, Message: msg}
}

// writeError answers e. A failure that is the calling agent hanging up
// (door.CallerGone: a store or Redis call ended by the request's own
// context) is logged as that, at INFO, like the other doors, not as
// funduq's trouble; genuine failures keep their level.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, e *apiError) {
	if e.Status >= 500 && e.Err != nil && door.CallerGone(r, e.Err) {
		door.LogCallerGone(h.o.Log, r, e.Err)
	} else {
		lvl := slog.LevelInfo
		if e.Status >= 500 && e.Status != http.StatusBadGateway {
			lvl = slog.LevelWarn
		}
		h.o.Log.Log(r.Context(), lvl, "kyok call refused", "status", e.Status, "code", e.Code, "message", e.Message, "err", e.Err)
	}
	body := map[string]any{"code": e.Code, "message": e.Message, "type": e.Code}
	if len(e.Refusal) > 0 {
		body["refusal"] = e.Refusal
	}
	if e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(max(e.RetryAfter, 1)))
	}
	if e.Final {
		w.Header().Set("X-Should-Retry", "false")
	}
	writeJSON(w, e.Status, map[string]any{"error": body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// WriteRefusal answers a refusal made in front of the door
// (door.SchemaGate, door.WrapAPIGateway's body check) in this door's envelope: a door refusal as it says,
// storage trouble as storageDown.
func (h *Handler) WriteRefusal(w http.ResponseWriter, r *http.Request, err error) {
	if de, ok := door.Refusal(err); ok {
		h.writeError(w, r, &apiError{Status: de.Status, Code: de.Code, Message: de.Message, RetryAfter: de.RetryAfter, Err: de.Err})
		return
	}
	h.writeError(w, r, storageDown(err))
}

// storageDown maps a store failure to 503.
func storageDown(err error) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable",
		Message: "funduq cannot reach its storage right now; retry shortly", Err: err}
}

// ServeHTTP is POST /kyok/v1/chat/completions.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.writeError(w, r, refuse(http.StatusMethodNotAllowed, "method_not_allowed", "use POST"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.writeError(w, r, refuse(http.StatusRequestEntityTooLarge, "body_too_large",
				fmt.Sprintf("the body exceeds %d bytes", h.o.MaxBody)))
			return
		}
		h.writeError(w, r, refuse(http.StatusBadRequest, "bad_request", "the body could not be read"))
		return
	}
	call, e := h.check(r, body)
	if e != nil {
		h.writeError(w, r, e)
		return
	}
	h.relay(w, r, call)
}

// call is a checked completion call.
type call struct {
	req    kyok.Request
	stream bool
}

// check runs the door's checks in order (package comment).
func (h *Handler) check(r *http.Request, body []byte) (call, *apiError) {
	ctx := r.Context()
	now := h.o.Now()
	// The scheme is matched in any case (RFC 9110 §11.1).
	token := r.Header.Get("Authorization")
	if len(token) > len("Bearer ") && strings.EqualFold(token[:len("Bearer ")], "Bearer ") {
		token = token[len("Bearer "):]
	}
	claims, err := identity.VerifyKyokToken(h.o.TokenSecret, token, now)
	if err != nil {
		return call{}, &apiError{Status: http.StatusUnauthorized, Code: "invalid_token", Message: "invalid or expired KYOK token", Err: err}
	}
	// Each storage call is a step of its own (door.Step): a hung database
	// is a 503 after one bound, not a call left waiting for ever.
	sctx, cancel := door.Step(ctx)
	kr, err := h.o.Store.GetKyokRun(sctx, claims.RunID)
	cancel()
	notActive := refuse(http.StatusForbidden, "run_not_active", "run is not currently active for this token")
	switch {
	case errors.Is(err, store.ErrNotFound):
		return call{}, notActive
	case err != nil:
		return call{}, storageDown(err)
	case kr.CancelRequested, kr.ProviderKey != claims.ProviderKey, kr.AgentName != claims.AgentName,
		kr.Status != run.Queued && kr.Status != run.Offering && kr.Status != run.Running:
		return call{}, notActive
	}
	tsRaw, sig := r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature)
	if tsRaw == "" || sig == "" {
		return call{}, refuse(http.StatusUnauthorized, "invalid_signature", "the call needs "+HeaderTimestamp+" and "+HeaderSignature)
	}
	ts, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil {
		return call{}, refuse(http.StatusUnauthorized, "invalid_signature", HeaderTimestamp+" must be an integer (Unix seconds)")
	}
	if err := identity.CheckFresh(ts, now, FreshWindow); err != nil {
		return call{}, &apiError{Status: http.StatusUnauthorized, Code: "invalid_signature",
			Message: "the call's timestamp is not within 60 s of funduq's clock", Err: err}
	}
	sctx, cancel = door.Step(ctx)
	_, err = h.o.Store.FindAgent(sctx, claims.ProviderKey, claims.AgentName)
	cancel()
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return call{}, refuse(http.StatusForbidden, "agent_not_registered", "the token's agent is not registered")
		}
		return call{}, storageDown(err)
	}
	pub, err := identity.ParsePublicKey(claims.ProviderKey)
	if err == nil {
		err = identity.Verify(pub, identity.KyokCallPayload(token, ts, body), sig)
	}
	if err != nil {
		return call{}, &apiError{Status: http.StatusUnauthorized, Code: "invalid_signature",
			Message: "the call's signature does not verify under the agent provider's key", Err: err}
	}
	if err := strictjson.Check(body, h.o.MaxJSONDepth); err != nil {
		// A body two JSON readers could read differently is never relayed
		// (core/strictjson): not JSON, invalid UTF-8, a repeated key, too deep.
		return call{}, &apiError{Status: http.StatusBadRequest, Code: "malformed_json",
			Message: "the body must be JSON in valid UTF-8, with no repeated key and limited nesting: " + err.Error(), Err: err}
	}
	if len(kr.Sealed) == 0 {
		return call{}, refuse(http.StatusServiceUnavailable, "no_kyok_binding", "run has no KYOK binding any more")
	}
	b, err := kyok.Open(h.o.TokenSecret, kr.Sealed)
	if err != nil {
		return call{}, &apiError{Status: http.StatusServiceUnavailable, Code: "no_kyok_binding",
			Message: "run has no usable KYOK binding", Err: err}
	}
	sctx, cancel = door.Step(ctx)
	served, err := h.o.Store.LLMOfferingServed(sctx, b.LLMProviderKey, b.LLMName)
	cancel()
	if err != nil {
		return call{}, storageDown(err)
	}
	if !served {
		return call{}, notAttached()
	}
	if err := kyok.ValidateChatRequest(body); err != nil {
		return call{}, refuse(http.StatusBadRequest, "invalid_request", err.Error())
	}
	id := kyok.NewRequestID()
	ctxJSON := b.Context
	if len(ctxJSON) == 0 {
		ctxJSON = json.RawMessage("null")
	}
	chain := kr.ActorChain
	if len(chain) == 0 {
		chain = json.RawMessage("null")
	}
	return call{stream: kyok.StreamRequested(body), req: kyok.Request{
		RequestID: id, RunID: claims.RunID, ProviderKey: claims.ProviderKey, AgentName: claims.AgentName,
		LLM: b.Ref(), Body: body, Context: ctxJSON, ActorChain: chain,
		ReplyKey: kyok.ReplyStream(h.o.Prefix, id), Deadline: now.Add(h.o.AckTimeout).UnixMilli(),
	}}, nil
}

func notAttached() *apiError {
	return refuse(http.StatusServiceUnavailable, "llm_not_attached",
		"the bound LLM offering is not attached to funduq right now")
}
