package intake

import (
	"log/slog"
	"math/rand/v2"
	"time"

	backoffpkg "github.com/funduq/funduq-go/core/backoff"
)

// Options tunes a Listener. Zero (or negative) fields take their defaults.
type Options struct {
	// PollInterval is how often CatchUp("poll") runs while connected.
	// Default 5s.
	PollInterval time.Duration
	// PingInterval is how often an idle wait is interrupted to ping the
	// connection, so a dead socket is noticed. Default 5s.
	PingInterval time.Duration
	// IOTimeout bounds each round trip the Listener makes itself: connect,
	// the LISTENs, a ping, closing a connection. Default 10s.
	IOTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the delay before a reconnect
	// attempt: it doubles with each consecutive failure from ReconnectMin up
	// to ReconnectMax, with jitter. Defaults 100ms and 5s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// Logger receives connection failures and skipped notifications.
	// Default slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultPollInterval = 5 * time.Second
	DefaultPingInterval = 5 * time.Second
	DefaultIOTimeout    = 10 * time.Second
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 5 * time.Second
)

// withDefaults fills in unset fields.
func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.PollInterval, DefaultPollInterval)
	def(&o.PingInterval, DefaultPingInterval)
	def(&o.IOTimeout, DefaultIOTimeout)
	def(&o.ReconnectMin, DefaultReconnectMin)
	def(&o.ReconnectMax, DefaultReconnectMax)
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = o.ReconnectMin
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// backoff returns the delay before reconnect attempt number attempt (1 for
// the first after a failure): min·2^(attempt-1) capped at max, then jittered
// down to a uniformly random point in its upper half ("equal jitter"), never
// below min. jitter(n) must return a value in [0, n).
func backoff(attempt int, lo, hi time.Duration, jitter func(n int64) int64) time.Duration {
	return backoffpkg.Policy{
		Min: lo, Max: hi,
		Jitter: 0.5, Spread: backoffpkg.Under, AtLeastMin: true,
		Rand: jitter,
	}.Delay(attempt)
}

// randJitter is backoff's jitter source in production.
func randJitter(n int64) int64 { return rand.Int64N(n) }
