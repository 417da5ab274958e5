package agui

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/store"
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

	// AuthorizedKey is the first presenter seat (D12): the caller's public
	// key as an authorizer in front of the door authenticated it ("" when
	// none did). The Lambda entry fills it from the request context. When
	// it answers "", the Funduq-Presenter header is the second seat.
	AuthorizedKey func(*http.Request) string
	Log           *slog.Logger

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
	// StorageGiveUp is how long a stream that cannot go on without the
	// record (a resume's opening read, a first read the live feed cannot
	// stand in for) keeps trying to read it before it ends typed
	// (door.TailOptions.GiveUp; default door.StorageGiveUp).
	StorageGiveUp time.Duration
	// Now is the clock for presenter freshness and KYOK token expiry.
	Now func() time.Time
}
