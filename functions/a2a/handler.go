package a2a

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// Defaults of Options.
const (
	DefaultMaxBody        = door.DefaultMaxBody
	DefaultDeadlineMargin = door.DefaultDeadlineMargin
	DefaultBlockBudget    = 10 * time.Minute
)

// Options configure a Handler. Store, Funduq and TokenSecret are required.
type Options struct {
	Store *store.Store
	// Feed is the live fan-out the broker publishes to; nil polls
	// PostgreSQL alone.
	Feed        *livefeed.Feed
	Funduq      *identity.Signer
	TokenSecret []byte
	Log         *slog.Logger

	// AuthorizedKey is the authorizer's presenter seat (D12); see agui.
	AuthorizedKey func(*http.Request) string
	// PublicURL is the door's public base URL (scheme://host[/prefix]) put
	// on agent cards; "" derives it from the request (X-Forwarded-Proto,
	// X-Forwarded-Host, Host).
	PublicURL string

	MaxBody int64
	// Limits bound a request (config.DoorLimits; unset fields take their
	// defaults). MaxBody, when set, overrides Limits.MaxBody.
	Limits config.DoorLimits
	// Tail paces streams and blocking sends (Store, Feed and Log are filled
	// in from above).
	Tail door.TailOptions
	// StreamBudget ends a stream (with a comment saying how to resume)
	// after this long; 0: none of its own. A request deadline always
	// applies, less DeadlineMargin.
	StreamBudget   time.Duration
	DeadlineMargin time.Duration
	// BlockBudget bounds how long a blocking message/send waits for the
	// task to settle before answering with the task as it stands.
	BlockBudget time.Duration
	Now         func() time.Time

	// beforeSnapshot, set by tests alone (export_test.go), runs as a
	// stream is about to read its opening snapshot: the seam where a run
	// may end between the stream's status read and that snapshot.
	beforeSnapshot func()
}

// Handler is the A2A door.
type Handler struct {
	o   Options
	log *slog.Logger
	mux *http.ServeMux
	// origins are the browser pages outside the doors' own origin that
	// may POST here (o.Limits.TrustedOrigins).
	origins *http.CrossOriginProtection
}

// New builds the door.
func New(o Options) (*Handler, error) {
	if err := door.Setup("a2a", o.Store, o.Funduq, o.TokenSecret,
		&o.Log, &o.Limits, &o.MaxBody, &o.DeadlineMargin, &o.Now); err != nil {
		return nil, err
	}
	if o.BlockBudget <= 0 {
		o.BlockBudget = DefaultBlockBudget
	}
	o.Tail.Store, o.Tail.Feed, o.Tail.Log = o.Store, o.Feed, o.Log
	o.PublicURL = strings.TrimRight(o.PublicURL, "/")
	origins, err := door.OriginGuard(o.Limits.TrustedOrigins)
	if err != nil {
		return nil, fmt.Errorf("a2a door: %w", err)
	}
	h := &Handler{o: o, log: o.Log, mux: http.NewServeMux(), origins: origins}
	h.mux.HandleFunc("/a2a/{provider}/{name}", door.Only(http.MethodPost, h.rpc))
	h.mux.HandleFunc("/a2a/{provider}/{name}/rpc", door.Only(http.MethodPost, h.rpc))
	h.mux.HandleFunc("/a2a/{provider}/{name}/.well-known/agent-card.json", door.Only(http.MethodGet, h.card))
	h.mux.HandleFunc("/", door.NoRoute)
	return h, nil
}

// Patterns are the path prefixes this door serves.
func Patterns() []string { return []string{"/a2a/"} }

// ForDeps builds the door on a door's shared connections, for a server
// that mounts several doors; a door that cannot be built answers 503.
func ForDeps(d *door.Deps, log *slog.Logger) http.Handler {
	h, err := New(Options{Store: d.Store, Feed: d.Feed, Funduq: d.Funduq, TokenSecret: d.TokenSecret, Log: log, Limits: d.Limits})
	if err != nil {
		if log != nil {
			log.Error("a2a door: build", "err", err)
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			door.WriteError(w, r, nil, door.Refuse(http.StatusServiceUnavailable, door.CodeUnavailable, "the A2A door is not configured"))
		})
	}
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	door.ServeClean(h.mux, h.origins, w, r)
}

// call is one JSON-RPC request in flight.
type call struct {
	h     *Handler
	w     http.ResponseWriter
	r     *http.Request
	body  []byte
	v     Version
	req   Request
	agent store.Agent
	// wrote is the task this request just wrote, when it streams it
	// (message/stream of a new task): what its stream can show without
	// reading the record.
	wrote *accepted
}

func (h *Handler) rpc(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			e := rpcErr(CodeInvalidRequest, "the body is larger than %d bytes", h.o.MaxBody)
			e.status = http.StatusRequestEntityTooLarge
			h.writeRPC(w, nil, nil, e)
			return
		}
		h.writeRPC(w, nil, nil, rpcErr(CodeParseError, "could not read the body"))
		return
	}
	// An unknown agent is a 404 before any JSON-RPC processing.
	ctx, cancel := door.Step(r.Context())
	agent, err := door.FindAgentCached(ctx, h.o.Store, r.PathValue("provider"), r.PathValue("name"))
	cancel()
	if _, refused := door.Refusal(err); err != nil && !refused {
		// Storage trouble (or a bug) is this door's JSON-RPC error like
		// anywhere past this point (-32043 with 503 and Retry-After,
		// design.md §Doors under storage faults), answering the call's id
		// when the body names one: a cold door's first look-up must not
		// answer a JSON-RPC client in another door's envelope.
		req, _ := ParseRequest(body)
		h.writeRPC(w, req.ID, nil, h.toRPC(r, err))
		return
	}
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	if e := door.CheckBody(body, h.o.Limits.MaxJSONDepth); e != nil {
		h.log.InfoContext(r.Context(), "a2a request refused", "path", r.URL.Path, "err", e.Error())
		h.writeRPC(w, nil, nil, rpcErr(CodeParseError, "%s", e.Message))
		return
	}
	req, perr := ParseRequest(body)
	if perr != nil {
		h.writeRPC(w, req.ID, nil, perr)
		return
	}
	stated := requestedVersion(r)
	v, ok := ParseVersion(stated)
	if !ok {
		h.writeRPC(w, req.ID, nil, rpcErr(CodeVersionNotSupported, "A2A-Version %q is not supported: this door speaks 0.3 and 1.0", stated))
		return
	}
	m, ok := LookupMethod(v, req.Method)
	if !ok {
		e := rpcErr(CodeMethodNotFound, "method %q is not an A2A %s method", req.Method, v)
		if other := otherVersion(v); other != 0 {
			if _, ok := LookupMethod(other, req.Method); ok {
				e.Message += "; it is an A2A " + other.String() + " method: send " + VersionHeader + ": " + other.String()
			}
		}
		h.writeRPC(w, req.ID, nil, e)
		return
	}
	if !m.Served {
		h.writeRPC(w, req.ID, nil, rpcErr(m.Refusal, "%s is not supported by this agent", req.Method))
		return
	}
	c := &call{h: h, w: w, r: r, body: body, v: v, req: req, agent: agent}
	switch m.Op {
	case OpSend:
		c.send(false)
	case OpStream:
		c.send(true)
	case OpGet:
		c.get()
	case OpCancel:
		c.cancel()
	case OpSubscribe:
		c.subscribe()
	case OpList:
		c.list()
	}
}

// requestedVersion is the version a request states: its A2A-Version
// header, else an A2A-Version query parameter (A2A 1.0 §3.6.1, for a
// client that cannot set headers; its name matched in any case), else ""
// (0.3, §3.6.2).
func requestedVersion(r *http.Request) string {
	if hv := r.Header.Values(VersionHeader); len(hv) > 0 {
		return hv[0]
	}
	for name, vals := range r.URL.Query() {
		if strings.EqualFold(name, VersionHeader) && len(vals) > 0 {
			return vals[0]
		}
	}
	return ""
}

func otherVersion(v Version) Version {
	if v == V03 {
		return V10
	}
	return V03
}

// writeRPC answers one JSON-RPC response (result or error).
func (h *Handler) writeRPC(w http.ResponseWriter, id []byte, result any, e *RPCError) {
	status := http.StatusOK
	if e != nil && e.status != 0 {
		status = e.status
	}
	if e != nil && e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(marshalResponse(id, result, e), '\n'))
}

func (c *call) result(v any) { c.h.writeRPC(c.w, c.req.ID, v, nil) }

// fail answers err as a JSON-RPC error: an *RPCError as it is, a door
// refusal mapped by its code, storage trouble as -32043 with 503, anything
// else as -32603 (logged, never leaked). A caller that went away hears
// nothing; it is logged as that (door.CallerGone), not as trouble.
func (c *call) fail(err error) {
	c.h.writeRPC(c.w, c.req.ID, nil, c.h.toRPC(c.r, err))
}

func (h *Handler) toRPC(r *http.Request, err error) *RPCError {
	var re *RPCError
	if errors.As(err, &re) {
		return re
	}
	if de, ok := door.Refusal(err); ok {
		e := &RPCError{Message: de.Message, Data: map[string]any{"reason": de.Code}}
		switch de.Code {
		case door.CodePresenterRequired, door.CodeInvalidChain, door.CodeBodyMismatch, door.CodePresenterProofStale:
			e.Code, e.status = CodeUnauthenticated, http.StatusUnauthorized
		case door.CodeMembershipRequired:
			e.Code = CodeMembershipRequired
		case door.CodeInvalidCancel:
			e.Code = CodeInvalidCancel
		case door.CodeInvalidResolution:
			e.Code = CodeInvalidResolution
		case door.CodeIdempotencyKeyReused:
			e.Code, e.status = CodeKeyReused, http.StatusUnprocessableEntity
		case door.CodeLLMNotFound, door.CodeThreadNotFound, door.CodeThreadMismatch, door.CodeInvalidRunInput, door.CodeBadRequest,
			door.CodeTooManyMessages, door.CodeMalformedJSON:
			e.Code = CodeInvalidParams
		case door.CodeThreadQueueFull:
			e.Code, e.status, e.retryAfter = CodeThreadQueueFull, http.StatusTooManyRequests, de.RetryAfter
		case door.CodeTaskNotFound:
			e.Code = CodeTaskNotFound
		case door.CodeNotCancellable:
			e.Code = CodeTaskNotCancelable
		case door.CodeIdentityKeyMismatch:
			e.Code, e.status = CodeMisconfigured, http.StatusServiceUnavailable
		case door.CodeSchemaNotMigrated:
			e.Code, e.status, e.retryAfter = CodeUnavailable, http.StatusServiceUnavailable, de.RetryAfter
		default:
			e.Code = CodeInternalError
		}
		// A refusal that is funduq's own failing (a misconfigured door)
		// needs an operator: ERROR (design.md §Logs).
		lvl := slog.LevelInfo
		if de.Status >= 500 {
			lvl = slog.LevelError
		}
		h.log.Log(r.Context(), lvl, "a2a request refused", "path", r.URL.Path, "code", e.Code, "reason", de.Code, "err", de.Error())
		return e
	}
	// A query naming what a stepped-down schema lacks is answered as a
	// door started cold over it answers (door.SchemaTrouble).
	if door.SchemaTrouble(err) {
		return h.toRPC(r, door.NotMigrated(err))
	}
	// Before Unavailable: a query that found the request's context
	// already done looks like storage trouble (pgx: a timeout, safe to
	// retry), and is the caller leaving.
	gone := door.CallerGone(r, err)
	if gone {
		door.LogCallerGone(h.log, r, err)
	}
	if door.Unavailable(err) {
		if !gone {
			h.log.ErrorContext(r.Context(), "a2a: storage unavailable", "path", r.URL.Path, "err", err)
		}
		return &RPCError{Code: CodeUnavailable, Message: "storage is unreachable; retry shortly",
			Data: map[string]any{"reason": door.CodeUnavailable}, status: http.StatusServiceUnavailable, retryAfter: 1}
	}
	if !gone {
		h.log.ErrorContext(r.Context(), "a2a: internal error", "path", r.URL.Path, "err", err)
	}
	return &RPCError{Code: CodeInternalError, Message: "internal error"}
}

// WriteRefusal answers a refusal made in front of the door
// (door.SchemaGate, door.WrapAPIGateway's body check) as the door answers its own: a JSON-RPC call as a
// JSON-RPC response to its id (toRPC), an agent card's GET in the
// envelope.
func (h *Handler) WriteRefusal(w http.ResponseWriter, r *http.Request, err error) {
	if r.Method != http.MethodPost {
		door.WriteError(w, r, h.log, err)
		return
	}
	body, _ := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBody))
	req, _ := ParseRequest(body)
	h.writeRPC(w, req.ID, nil, h.toRPC(r, err))
}

// streamEnd is when a stream must end (door.StreamEnd); zero for none.
func (h *Handler) streamEnd(ctx context.Context, budget time.Duration) time.Time {
	return door.StreamEnd(ctx, budget, h.o.DeadlineMargin)
}
