package agui

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// Defaults of Options.
const (
	DefaultMaxBody        = 1 << 20 // 1 MiB
	DefaultHeartbeat      = door.DefaultHeartbeat
	DefaultLiveBlock      = door.DefaultLiveBlock
	DefaultPollInterval   = door.DefaultPollInterval
	DefaultDBCheck        = door.DefaultDBCheck
	DefaultDeadlineMargin = 3 * time.Second
	DefaultSettleWait     = door.DefaultSettleWait
)

// Options configure a Handler. Store, Funduq and TokenSecret are required.
type Options struct {
	Store *store.Store
	// Feed is the live fan-out the broker publishes to. nil streams by
	// polling PostgreSQL alone.
	Feed *livefeed.Feed
	// Funduq signs the dispatch hop of a relayed actor chain.
	Funduq *identity.Signer
	// TokenSecret signs KYOK tokens.
	TokenSecret []byte
	Log         *slog.Logger

	// AuthorizedKey is the first presenter seat (D12): the caller's public
	// key as an authorizer in front of the door authenticated it ("" when
	// none did). The Lambda entry fills it from the request context. When
	// it answers "", the Funduq-Presenter header is the second seat.
	AuthorizedKey func(*http.Request) string

	// MaxBody caps a POST body (default Limits.MaxBody; larger is 413).
	MaxBody int64
	// Limits bound a request (config.DoorLimits; unset fields take their
	// defaults): JSON depth, messages per request, runs queued per thread.
	Limits config.DoorLimits
	// Heartbeat is the idle interval after which a stream sends an SSE
	// comment, so proxies and clients keep a silent stream open.
	Heartbeat time.Duration
	// StreamBudget ends a stream (with a comment telling the client to
	// reconnect with Last-Event-ID) after this long; 0 means no budget of
	// its own. A request context deadline (Lambda's) always applies, less
	// DeadlineMargin.
	StreamBudget   time.Duration
	DeadlineMargin time.Duration
	// LiveBlock is the longest single wait on the live feed.
	LiveBlock time.Duration
	// PollInterval paces PostgreSQL polling when the live feed is absent or
	// failing, and after a stale end marker.
	PollInterval time.Duration
	// DBCheck is how often a stream fed by Redis re-checks PostgreSQL anyway
	// (an event the broker stored but failed to publish; a run that ended
	// while its end marker was lost).
	DBCheck time.Duration
	// SettleWait bounds how long a stream, having relayed its terminal
	// event, waits for the broker to record the run's outcome before it
	// ends (see the stream's settle step).
	SettleWait time.Duration
	// Now is the clock for presenter freshness and KYOK token expiry.
	Now func() time.Time
}

// Handler is the AG-UI door's http.Handler.
type Handler struct {
	o    Options
	tail door.TailOptions // the stream's pacing, from o
	log  *slog.Logger
	mux  *http.ServeMux
}

// New builds the door.
func New(o Options) (*Handler, error) {
	if o.Store == nil || o.Funduq == nil || len(o.TokenSecret) == 0 {
		return nil, errors.New("agui: Options.Store, Funduq and TokenSecret are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Limits = door.Limits(o.Limits)
	if o.MaxBody <= 0 {
		o.MaxBody = o.Limits.MaxBody
	}
	if o.DeadlineMargin <= 0 {
		o.DeadlineMargin = DefaultDeadlineMargin
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	// Unset pacing takes door.TailOptions' defaults.
	tail := door.TailOptions{Store: o.Store, Feed: o.Feed, Log: o.Log, LiveBlock: o.LiveBlock,
		PollInterval: o.PollInterval, DBCheck: o.DBCheck, Heartbeat: o.Heartbeat, SettleWait: o.SettleWait}
	h := &Handler{o: o, log: o.Log, tail: tail}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("/agui/{provider}/{name}", h.methods(http.MethodPost, h.post))
	h.mux.HandleFunc("/threads/{threadId}", h.methods(http.MethodGet, h.getThread))
	h.mux.HandleFunc("/runs/{runId}/events", h.methods(http.MethodGet, h.getEvents))
	h.mux.Handle("GET /agents", door.Agents(o.Store, o.Log))
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		door.WriteError(w, r, nil, door.Refuse(http.StatusNotFound, door.CodeNotFound, "no such route: %s %s", r.Method, r.URL.Path))
	})
	return h, nil
}

// Patterns are the path prefixes this door serves, for a server that
// mounts several doors on one mux.
func Patterns() []string { return []string{"/agui/", "/threads/", "/runs/"} }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) methods(method string, fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			door.WriteError(w, r, nil, door.Refuse(http.StatusMethodNotAllowed, door.CodeMethodNotAllowed,
				"%s is not allowed here; use %s", r.Method, method))
			return
		}
		fn(w, r)
	}
}
