package tickets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/funduq/funduq-go/core/apierr"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/strictjson"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/jackc/pgx/v5/pgconn"
)

// MaxBodyBytes bounds a POST /tickets body.
const MaxBodyBytes = 4 << 10

// IssueTimeout bounds the ticket store's answer, so an unreachable or hung
// Redis is a prompt 503 with Retry-After rather than a hang (D13). The
// store's client must honour context deadlines (go-redis:
// ContextTimeoutEnabled, as the broker node sets it).
const IssueTimeout = 1500 * time.Millisecond

// Handler serves POST /tickets (design.md §The provider wire): body {"publicKey": "<64 lowercase
// hex>"} ("public_key" is accepted too), answer 201 {"ticket",
// "funduqPublicKey"}. Issuing is the admission decision and is left
// unauthenticated here; put edge auth in front of it if the deployment wants
// it. The handler does not look at the path: mount it where it belongs.
//
// Errors are the doors' envelope (core/apierr), {"error": {"code",
// "message"}}: 400 bad_request for a bad body, 405 method_not_allowed, 413
// body_too_large over MaxBodyBytes, 429 rate_limited with Retry-After past
// the per-key rate limit (LimitedHandler), 503 storage_unavailable with
// Retry-After: 1 when the ticket store fails (the cause is logged, not
// sent) or the leader's key cannot be checked (503 not_leader naming the
// leader instead when HandlerOptions.Leader knows it), 503
// identity_key_mismatch with Retry-After when this node's key is not the
// published one, and 503 takeover_in_progress with Retry-After while a
// takeover is under way (both HandlerOptions.PublishedKey). log may be
// nil.
// funduqKeyHex must be a canonical public key; Handler panics otherwise, as
// that is a wiring mistake.
func Handler(store *Store, funduqKeyHex string, log *slog.Logger) http.Handler {
	return LimitedHandler(store, funduqKeyHex, log, HandlerOptions{})
}

// DefaultPerMinute is HandlerOptions.PerMinute's default (config's
// FUNDUQ_TICKETS_PER_MINUTE).
const DefaultPerMinute = 60

// HandlerOptions tune LimitedHandler.
type HandlerOptions struct {
	// PerMinute caps the tickets one public key claims (the links it
	// opens) per calendar minute, counted in Redis so every node shares the
	// count (0: DefaultPerMinute). A request for a key that has claimed
	// that many this minute is 429 with Retry-After (the seconds left in
	// the minute) and issues nothing. Requests are not counted: anyone may
	// ask in any key's name.
	PerMinute int
	// Now is the clock the minute is read from (time.Now if nil); the
	// Store's Now should be the same clock.
	Now func() time.Time
	// PublishedKey, when set, returns funduq's public key as the leader of
	// record published it ("" while none has). A node whose own key is
	// another issues nothing: a provider pins the key a ticket names and
	// would then refuse the leader it reaches (design.md §Deployment, "One
	// identity key"). The answer is 503 identity_key_mismatch with
	// Retry-After (the load balancer sends the retry elsewhere), naming no
	// key. ErrTakeover is 503 takeover_in_progress with Retry-After; any
	// other error is 503 storage_unavailable. It is asked before the
	// ticket store, so a refused request spends nothing there; it should
	// be cheap (cached).
	PublishedKey func(ctx context.Context) (string, error)
	// Leader, when set, is asked when PublishedKey fails otherwise than
	// with ErrTakeover — a standby that cannot read the leader row, its
	// database out of reach — for the leader's advertised URL as it knows
	// it some other way ("" with why, a short public phrase, when it
	// does not). Named, the answer is 503 not_leader with Retry-After and
	// "leader", as a standby's /ws/provider answers, so a provider whose
	// one URL is this node finds the leader (design.md §Deployment, "A
	// standby without PostgreSQL"); else 503 storage_unavailable saying
	// why no leader is named.
	Leader func(ctx context.Context) (url, why string)
}

// MismatchRetryAfter is the Retry-After, in seconds, of the refusal by a
// node whose key is not the published one.
const MismatchRetryAfter = "5"

// ErrTakeover is what HandlerOptions.PublishedKey answers on a node that
// is not the leader while a takeover is under way: the lease is another
// node's than the one the leader row names, so the row's key may not be
// the one the next leader answers to, and no leader takes links meanwhile
// (design.md §Deployment, "A takeover under way").
var ErrTakeover = errors.New("a takeover is under way: the lease's holder is not the leader row's")

// CodeTakeoverInProgress is the refusal of a ticket while a takeover is
// under way (ErrTakeover); the provider retries after TakeoverRetryAfter.
// The doors' envelope (core/apierr) with a code of its own: it is a
// refusal of POST /tickets alone.
const CodeTakeoverInProgress = "takeover_in_progress"

// TakeoverRetryAfter is the Retry-After, in seconds, of that refusal: a
// takeover's write lands in milliseconds unless a fenced write holds it.
const TakeoverRetryAfter = "1"

// LimitedHandler is Handler with its per-key rate limit set.
func LimitedHandler(store *Store, funduqKeyHex string, log *slog.Logger, o HandlerOptions) http.Handler {
	if o.PerMinute <= 0 {
		o.PerMinute = DefaultPerMinute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if _, err := identity.ParsePublicKey(funduqKeyHex); err != nil {
		panic(fmt.Sprintf("tickets.Handler: funduq key: %v", err))
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &handler{store: store, funduqKey: funduqKeyHex, log: log, o: o}
}

type handler struct {
	store     *Store
	funduqKey string
	log       *slog.Logger
	o         HandlerOptions
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		apierr.Write(w, http.StatusMethodNotAllowed, apierr.New(apierr.CodeMethodNotAllowed, "method %s not allowed; use POST", r.Method))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			apierr.Write(w, http.StatusRequestEntityTooLarge, apierr.New(apierr.CodeBodyTooLarge, "body is larger than %d bytes", MaxBodyBytes))
			return
		}
		apierr.Write(w, http.StatusBadRequest, apierr.New(apierr.CodeBadRequest, "could not read the body"))
		return
	}
	key, msg := parseBody(body)
	if msg != "" {
		apierr.Write(w, http.StatusBadRequest, apierr.New(apierr.CodeBadRequest, "%s", msg))
		return
	}
	// Redis is bounded here, not by the caller: a hung Redis answers 503
	// within IssueTimeout.
	ictx, cancel := context.WithTimeout(r.Context(), IssueTimeout)
	defer cancel()
	if h.o.PublishedKey != nil {
		published, err := h.o.PublishedKey(ictx)
		if errors.Is(err, ErrTakeover) {
			// Logged by the PublishedKey reader, once per takeover, not
			// per request; the answer names no node and no key.
			w.Header().Set("Retry-After", TakeoverRetryAfter)
			apierr.Write(w, http.StatusServiceUnavailable, apierr.New(CodeTakeoverInProgress,
				"a funduq broker node is taking over; retry shortly"))
			return
		}
		if err != nil {
			h.logKeyCheckFailed(r.Context(), err)
			w.Header().Set("Retry-After", "1")
			if h.o.Leader == nil {
				apierr.Write(w, http.StatusServiceUnavailable, apierr.New(apierr.CodeUnavailable, "broker store unavailable; retry shortly"))
				return
			}
			if url, why := h.o.Leader(ictx); url != "" {
				body := apierr.New(apierr.CodeNotLeader, "this funduq broker node is a standby and cannot reach its database "+
					"to check the leader's identity key, so it issues no ticket; connect to the leader")
				body.Leader = url
				apierr.Write(w, http.StatusServiceUnavailable, body)
			} else {
				apierr.Write(w, http.StatusServiceUnavailable, apierr.New(apierr.CodeUnavailable,
					"broker store unavailable: this funduq broker node cannot check the leader's identity key, "+
						"and knows no leader to name (%s); retry shortly", why))
			}
			return
		}
		if published != "" && published != h.funduqKey {
			// Both keys are logged by the PublishedKey reader, once per
			// change, not per request.
			w.Header().Set("Retry-After", MismatchRetryAfter)
			apierr.Write(w, http.StatusServiceUnavailable, apierr.New(apierr.CodeIdentityKeyMismatch,
				"funduq is misconfigured: this broker node's identity key is not the leader's, so it issues no tickets; "+
					"retry (another node may answer), and an operator must set the same key everywhere"))
			return
		}
	}
	retry, err := h.store.over(ictx, key, h.o.PerMinute, h.o.Now())
	if err == nil && retry > 0 {
		h.log.WarnContext(r.Context(), "tickets: rate limit", "provider_key", key, "per_minute", h.o.PerMinute)
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		apierr.Write(w, http.StatusTooManyRequests, apierr.New(apierr.CodeRateLimited, "at most %d tickets per key per minute; retry in %d s", h.o.PerMinute, retry))
		return
	}
	var ticket string
	if err == nil {
		ticket, err = h.store.Issue(ictx, key)
	}
	if err != nil {
		h.log.ErrorContext(r.Context(), "tickets: issue failed", "err", err)
		w.Header().Set("Retry-After", "1")
		apierr.Write(w, http.StatusServiceUnavailable, apierr.New(apierr.CodeUnavailable, "ticket store unavailable; retry shortly"))
		return
	}
	apierr.WriteJSON(w, http.StatusCreated, wire.TicketResponse{Ticket: ticket, FunduqPublicKey: h.funduqKey})
}

// pgDriverError is how pgconn wraps a failed query's own error (a
// network one, say); go-redis's errors do not say SafeToRetry.
type pgDriverError interface {
	error
	SafeToRetry() bool
}

// logKeyCheckFailed logs why PublishedKey failed. Redis out of reach (the
// lease's holder is read there) is said as that, with the address this
// node's Redis is at: "could not check the leader's identity key" alone
// sent an operator after a key mismatch that was not there. A network
// error under PostgreSQL's driver (the leader row: its connect, or a
// query's wrapper, which alone says SafeToRetry) is not Redis's.
func (h *handler) logKeyCheckFailed(ctx context.Context, err error) {
	_, pg := errors.AsType[*pgconn.ConnectError](err)
	if _, ok := errors.AsType[pgDriverError](err); ok {
		pg = true
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && !pg {
		addr := h.store.addr()
		if addr == "" && op.Addr != nil {
			addr = op.Addr.String()
		}
		h.log.ErrorContext(ctx, "tickets: Redis could not be reached; the leader's identity key is unchecked",
			"redis_addr", addr, "err", err)
		return
	}
	h.log.ErrorContext(ctx, "tickets: could not check the leader's identity key", "err", err)
}

// parseBody returns the requested key, or a message saying what is wrong.
func parseBody(body []byte) (key, msg string) {
	if err := strictjson.Check(body, 8); err != nil {
		return "", "body must be one JSON object in valid UTF-8 with no repeated key: " + err.Error()
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return "", `body must be a JSON object {"publicKey": "<64 lowercase hex chars>"}`
	}
	var got []string
	for _, field := range []string{"publicKey", "public_key"} {
		raw, ok := obj[field]
		if !ok {
			continue
		}
		var s string
		if string(raw) == "null" || json.Unmarshal(raw, &s) != nil {
			return "", field + " must be a string"
		}
		got = append(got, s)
	}
	switch {
	case len(got) == 0:
		return "", "publicKey is required"
	case len(got) == 2 && got[0] != got[1]:
		return "", "publicKey and public_key disagree"
	case got[0] == "":
		return "", "publicKey is empty"
	}
	if _, err := identity.ParsePublicKey(got[0]); err != nil {
		return "", "publicKey: " + strings.TrimPrefix(err.Error(), identity.ErrBadKey.Error()+": ")
	}
	return got[0], ""
}
