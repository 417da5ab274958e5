package agui

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/funduq/funduq-go/functions/door"
)

// Defaults of Options.
const (
	DefaultMaxBody        = door.DefaultMaxBody
	DefaultHeartbeat      = door.DefaultHeartbeat
	DefaultLiveBlock      = door.DefaultLiveBlock
	DefaultPollInterval   = door.DefaultPollInterval
	DefaultDBCheck        = door.DefaultDBCheck
	DefaultDeadlineMargin = door.DefaultDeadlineMargin
	DefaultSettleWait     = door.DefaultSettleWait
)

// Handler is the AG-UI door's http.Handler.
type Handler struct {
	o    Options
	log  *slog.Logger
	mux  *http.ServeMux
	tail door.TailOptions // the stream's pacing, from o
	// origins are the browser pages outside the doors' own origin that
	// may POST here (o.Limits.TrustedOrigins).
	origins *http.CrossOriginProtection
}

// New builds the door.
func New(o Options) (*Handler, error) {
	if err := door.Setup("agui", o.Store, o.Funduq, o.TokenSecret,
		&o.Log, &o.Limits, &o.MaxBody, &o.DeadlineMargin, &o.Now); err != nil {
		return nil, err
	}
	// Unset pacing takes door.TailOptions' defaults.
	tail := door.TailOptions{Store: o.Store, Feed: o.Feed, Log: o.Log, LiveBlock: o.LiveBlock,
		PollInterval: o.PollInterval, DBCheck: o.DBCheck, Heartbeat: o.Heartbeat, SettleWait: o.SettleWait,
		GiveUp: o.StorageGiveUp}
	origins, err := door.OriginGuard(o.Limits.TrustedOrigins)
	if err != nil {
		return nil, fmt.Errorf("agui door: %w", err)
	}
	h := &Handler{o: o, log: o.Log, tail: tail, origins: origins}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("/agui/{provider}/{name}", door.Only(http.MethodPost, h.post))
	h.mux.HandleFunc("/threads/{threadId}", door.Only(http.MethodGet, h.getThread))
	h.mux.HandleFunc("/runs/{runId}/events", door.Only(http.MethodGet, h.getEvents))
	h.mux.HandleFunc("/agents", door.Only(http.MethodGet, door.Agents(o.Store, o.Log, o.Limits.AgentsHiddenAfter).ServeHTTP))
	h.mux.HandleFunc("/", door.NoRoute)
	return h, nil
}

// Patterns are the path prefixes this door serves, for a server that
// mounts several doors on one mux.
func Patterns() []string { return []string{"/agui/", "/threads/", "/runs/"} }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	door.ServeClean(h.mux, h.origins, w, r)
}
