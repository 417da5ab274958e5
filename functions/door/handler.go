package door

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
)

// What every door's handler takes alike: its common options' defaults,
// the method check, the refusal of an unknown route, and when a stream
// must end.

// DefaultMaxBody is a door's request body cap unless Limits say otherwise.
const DefaultMaxBody = 1 << 20 // 1 MiB

// DefaultDeadlineMargin is how long before a request's deadline (Lambda's)
// a stream ends, so its last write goes out.
const DefaultDeadlineMargin = 3 * time.Second

// Setup checks a door's required options (the store, the signer of
// dispatch hops, the KYOK token secret; pkg names the door in the error)
// and fills the defaults of the options every door takes alike: a discard
// logger, Limits' defaults, MaxBody from them, DefaultDeadlineMargin, the
// wall clock.
func Setup(pkg string, st *store.Store, funduq *identity.Signer, tokenSecret []byte,
	log **slog.Logger, limits *config.DoorLimits, maxBody *int64, margin *time.Duration, now *func() time.Time) error {
	if st == nil || funduq == nil || len(tokenSecret) == 0 {
		return errors.New(pkg + ": Options.Store, Funduq and TokenSecret are required")
	}
	if *log == nil {
		*log = slog.New(slog.DiscardHandler)
	}
	*limits = Limits(*limits)
	if *maxBody <= 0 {
		*maxBody = limits.MaxBody
	}
	if *margin <= 0 {
		*margin = DefaultDeadlineMargin
	}
	if *now == nil {
		*now = time.Now
	}
	return nil
}

// Only answers 405 (with Allow) to a request whose method is not method.
func Only(method string, fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			WriteError(w, r, nil, Refuse(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
				"%s is not allowed here; use %s", r.Method, method))
			return
		}
		fn(w, r)
	}
}

// NoRoute answers 404 not_found to a path a door does not serve.
func NoRoute(w http.ResponseWriter, r *http.Request) {
	WriteError(w, r, nil, Refuse(http.StatusNotFound, CodeNotFound, "no such route: %s %s", r.Method, r.URL.Path))
}

// StreamEnd is when a stream must end: budget from now (0: none of its
// own), or the request's deadline less margin, whichever comes first;
// zero for none.
func StreamEnd(ctx context.Context, budget, margin time.Duration) time.Time {
	var end time.Time
	if budget > 0 {
		end = time.Now().Add(budget)
	}
	if dl, ok := ctx.Deadline(); ok {
		if d := dl.Add(-margin); end.IsZero() || d.Before(end) {
			end = d
		}
	}
	return end
}
