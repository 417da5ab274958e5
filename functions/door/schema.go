package door

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/funduq/funduq-go/core/store"
)

// CodeSchemaNotMigrated: the database lacks migrations this door needs
// (store.CheckSchemaReached); the caller hears only that the service is
// not ready, the operator's log says what to run.
const CodeSchemaNotMigrated = "schema_not_migrated"

// SchemaRecheck is how long a door that found the schema behind answers
// CodeSchemaNotMigrated before it reads the version again, so a warm
// Lambda serves once the operator has migrated, at one query a period.
var SchemaRecheck = 10 * time.Second

// RefusalWriter is a door handler that answers an error in its own
// envelope (A2A's JSON-RPC, KYOK's OpenAI-style body) as it answers one of
// its own: a *Error, or storage trouble (Unavailable). SchemaGate.Guard
// and WrapAPIGateway's body check use it; a handler without it is
// answered with WriteError.
type RefusalWriter interface {
	WriteRefusal(w http.ResponseWriter, r *http.Request, err error)
}

// SchemaGate holds a door's requests until the database is known to carry
// the schema it needs (design.md §Deployment, "The doors need the migrated
// schema"). Once the check passes it costs an atomic load a request; it is
// checked once a cold start, and again only while it has not passed: on
// the next request after storage trouble (answered as the door answers
// storage trouble), or SchemaRecheck after finding the schema behind.
type SchemaGate struct {
	store *store.Store
	log   *slog.Logger
	now   func() time.Time

	ready atomic.Bool
	mu    sync.Mutex
	// behind is the last check's refusal and when it was made.
	behind    error
	checkedAt time.Time
}

// NewSchemaGate is a gate over st; log takes the ERROR line naming the
// versions.
func NewSchemaGate(st *store.Store, log *slog.Logger) *SchemaGate {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SchemaGate{store: st, log: log, now: time.Now}
}

// Check reads the schema version (under StorageTimeout) unless it passed
// already: nil once it has, a *store.SchemaBehindError while the schema
// is older than this binary needs (logged at ERROR), any other error when
// the read failed (storage trouble: the next Check reads again).
func (g *SchemaGate) Check(ctx context.Context) error {
	if g.ready.Load() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ready.Load() {
		return nil
	}
	if g.behind != nil && g.now().Sub(g.checkedAt) < SchemaRecheck {
		return g.behind
	}
	ctx, cancel := context.WithTimeout(ctx, StorageTimeout)
	err := g.store.CheckSchemaReached(ctx)
	cancel()
	var behind *store.SchemaBehindError
	switch {
	case err == nil:
		g.ready.Store(true)
		if g.behind != nil {
			g.log.Info("the database schema is now migrated; serving", "err_before", g.behind.Error())
		}
		g.behind = nil
	case errors.As(err, &behind):
		g.behind, g.checkedAt = err, g.now()
		g.log.ErrorContext(ctx, "the door refuses every request: "+err.Error(), "applied", behind.Applied, "needed", behind.Needed)
	default:
		g.log.WarnContext(ctx, "could not read the database schema version; reading it again on the next request", "err", err)
	}
	return err
}

// Guard answers each request by h once Check passes. While the schema is
// behind it answers 503 CodeSchemaNotMigrated with Retry-After; when the
// check could not read the version it answers as h answers storage
// trouble (503 storage_unavailable), or, for an error that is not storage
// trouble, lets h answer. A nil gate guards nothing.
func (g *SchemaGate) Guard(h http.Handler) http.Handler {
	if g == nil {
		return h
	}
	return guarded{g: g, h: h}
}

// guarded is a door behind its SchemaGate. It is a RefusalWriter too, so
// what stands in front of it (WrapAPIGateway's body check) still answers
// in the door's envelope.
type guarded struct {
	g *SchemaGate
	h http.Handler
}

func (d guarded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.g.ready.Load() {
		d.h.ServeHTTP(w, r)
		return
	}
	err := d.g.Check(r.Context())
	var behind *store.SchemaBehindError
	switch {
	case err == nil:
	case errors.As(err, &behind):
		d.WriteRefusal(w, r, NotMigrated(err))
		return
	case Unavailable(err):
		d.WriteRefusal(w, r, err)
		return
	}
	d.h.ServeHTTP(w, r)
}

// WriteRefusal answers err as the guarded door answers its own refusals.
func (d guarded) WriteRefusal(w http.ResponseWriter, r *http.Request, err error) {
	WriteRefusal(d.h, d.g.log, w, r, err)
}

// WriteRefusal answers err, a refusal made in front of door h, in h's own
// envelope when h is a RefusalWriter, else in the one error envelope
// (WriteError).
func WriteRefusal(h http.Handler, log *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	if rw, ok := h.(RefusalWriter); ok {
		rw.WriteRefusal(w, r, err)
		return
	}
	WriteError(w, r, log, err)
}

// NotMigrated is the refusal of a request while the schema is behind: 503
// with Retry-After, saying no more than that the service is not ready.
func NotMigrated(err error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeSchemaNotMigrated,
		Message: "the service is not ready; retry later", RetryAfter: int(SchemaRecheck / time.Second), Err: err}
}
