package lease

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/redisbound"
)

// Why leadership ended (context.Cause of the leader context).
var (
	ErrLost     = errors.New("lease lost: another holder or none")
	ErrExpiring = errors.New("lease could not be renewed in time: stepping down before it can expire")
	ErrHandover = errors.New("handing over the lease on request")
	// ErrSteppedDown: Lead returned while the lease was still held (the
	// leader could not take its epoch or keep writing).
	ErrSteppedDown = errors.New("the leader stepped down")
)

// Elector campaigns for a lease and leads while it holds it.
type Elector struct {
	Lease *Lease
	// Lead runs while this node leads, under a context cancelled the moment
	// leadership ends; it must return promptly then.
	Lead func(ctx context.Context)
	// Channel is where lease events are published (released, handover),
	// so standbys try at once instead of at their next retry.
	Channel string
	Log     *slog.Logger
	// RenewEvery defaults to TTL/3; RetryEvery (a standby's try) to TTL/5.
	RenewEvery, RetryEvery time.Duration
	// Margin is how long before the lease could expire a leader that has
	// not renewed steps down; defaults to TTL/4.
	Margin time.Duration
	// Cooloff is how long a node that handed over or stepped down (its
	// store failing, or fenced for want of renewals) waits before it
	// campaigns again, so a standby gets the lease (defaults to 2×RetryEvery).
	Cooloff time.Duration
	// CanLead, when set, is asked before each campaign: a node that
	// cannot lead (its PostgreSQL out of reach, design.md D13) does not
	// campaign, leaving the lease to a node that can, rather than taking
	// it only to give it up again after store_retry_for. Each call is
	// bounded by the campaign's bound.
	CanLead func(ctx context.Context) error
	// StuckAfter is how much longer than the TTL a leader may go without
	// a renewal landing before Check calls its loop stuck; defaults to
	// TTL/2 (health.go).
	StuckAfter time.Duration

	mu      sync.Mutex
	leading bool
	// For Check: whether Run is running, when the loop last made
	// progress, and the send time of the last renewal (or acquire) that
	// landed.
	running           bool
	progress, renewed time.Time
}

// Event payloads on Channel.
const (
	EventReleased = "released"
	EventHandover = "handover"
)

func (e *Elector) defaults() {
	ttl := e.Lease.ttl
	if e.RenewEvery <= 0 {
		e.RenewEvery = ttl / 3
	}
	if e.RetryEvery <= 0 {
		e.RetryEvery = ttl / 5
	}
	if e.Margin <= 0 {
		e.Margin = ttl / 4
	}
	if e.Cooloff <= 0 {
		e.Cooloff = 2 * e.RetryEvery
	}
	if e.StuckAfter <= 0 {
		e.StuckAfter = e.Lease.ttl / 2
	}
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
}

// Leading reports whether this elector holds the lease now.
func (e *Elector) Leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading
}

// Run campaigns until ctx ends. When it returns, Lead has returned and the
// lease, if it was held, has been released.
func (e *Elector) Run(ctx context.Context) error {
	e.defaults()
	e.mu.Lock()
	e.running, e.progress = true, time.Now()
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
	}()
	wake := make(chan string, 4)
	if e.Channel != "" {
		stop := e.listen(ctx, wake)
		defer stop()
	}
	var cooloff time.Time
	unable := false // CanLead failed last time asked
	for ctx.Err() == nil {
		if !time.Now().Before(cooloff) && e.mayCampaign(ctx, &unable) {
			sent := time.Now()
			// Bounded by funduq's clock, not the Redis client's (for
			// ever with read_timeout=0): a node told to stop stops
			// (design.md §Failure). The bound is what the lease would
			// still be worth (TTL − Margin; never under redisbound's
			// Slack): a slow but healthy Redis, whose campaign includes
			// a new connection's set-up, is still won, and an answer
			// later than that is useless anyway (§A hung Redis).
			actx, cancel := context.WithTimeout(ctx, e.campaignBound())
			ok, err := e.Lease.Acquire(actx)
			cancel()
			e.progressed(time.Now(), false) // won or not, the campaign completed
			if err != nil {
				e.Log.WarnContext(ctx, "lease campaign failed", "err", err)
			} else if ok {
				// After a handover, and after a leader stepped down on its
				// own (its store failing, design.md D13, or its renewals not
				// landing, D10), a standby gets the lease first: campaigning
				// again at once, right after the release, would mostly win
				// it back, and a node that cannot reach PostgreSQL or Redis
				// would keep it from one that can (failover chaos seed 225).
				if cause := e.lead(ctx, sent, wake); errors.Is(cause, ErrHandover) || errors.Is(cause, ErrSteppedDown) || errors.Is(cause, ErrExpiring) {
					cooloff = time.Now().Add(e.Cooloff)
				}
				continue
			}
		}
		// A node cooling off tries the moment its cool-off ends, not at
		// its next retry: with two nodes cooling off (one fenced, the
		// other handing over), the one whose cool-off ends first must get
		// the lease first, or the one just asked to hand over takes it back
		// (failover chaos seed 310).
		wait := e.RetryEvery
		if left := time.Until(cooloff); left > 0 && left < wait {
			wait = left
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// mayCampaign asks CanLead whether this node may campaign now, logging
// when the answer changes (unable holds the last one): a node kept from
// its store retries every RetryEvery without a log line each time.
func (e *Elector) mayCampaign(ctx context.Context, unable *bool) bool {
	if e.CanLead == nil {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, e.campaignBound())
	err := e.CanLead(cctx)
	cancel()
	if err != nil {
		e.progressed(time.Now(), false) // asked and answered: the loop is alive
		if !*unable && ctx.Err() == nil {
			e.Log.WarnContext(ctx, "not campaigning for the lease: this node cannot lead", "err", err)
		}
		*unable = true
		return false
	}
	if *unable {
		e.Log.InfoContext(ctx, "this node can lead again: campaigning for the lease")
	}
	*unable = false
	return true
}

// eventWait bounds each wait of listen on Redis: a connection's set-up
// and each read for an event. On a hung Redis it is how long a node told
// to stop may still wait for it.
const eventWait = time.Second

// pingUnanswered is how many reads of eventWait a ping on the
// subscription may go unanswered before listen takes the connection for
// dead and subscribes again on a new one.
const pingUnanswered = 2

// listen passes lease events on Channel to wake until stop is called.
// It reads them itself, each read and each (re)connection bounded by
// eventWait, rather than through go-redis's PubSub.Channel: that one
// reconnects under no deadline, holding the lock Close needs, so on a
// hung Redis with read_timeout=0 a node could not stop (design.md
// §Failure). Events only spare standbys their next retry: one missed
// while Redis is away costs at most RetryEvery. A quiet subscription is
// pinged, and one whose ping goes unanswered is replaced: a connection
// dropped without a word (a NAT forgetting an idle connection, Redis
// restarted behind a proxy) only ever times out, and a leader on it
// would never hear a handover request (design.md §Failure, the lease).
func (e *Elector) listen(ctx context.Context, wake chan<- string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	subscribe := func() *redis.PubSub {
		sctx, scancel := context.WithTimeout(ctx, eventWait)
		defer scancel()
		// On failure the channel is still recorded: the first read
		// subscribes again.
		return e.Lease.rdb.Subscribe(sctx, e.Channel)
	}
	var mu sync.Mutex // guards sub, replaced by the reader, closed by stop
	sub := subscribe()
	current := func() *redis.PubSub {
		mu.Lock()
		defer mu.Unlock()
		return sub
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		failures := 0
		quiet := -1 // reads timed out since the ping; -1: none sent
		for ctx.Err() == nil {
			s := current()
			rctx, rcancel := context.WithTimeout(ctx, eventWait)
			msg, err := s.ReceiveTimeout(rctx, eventWait)
			rcancel()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
					// Nothing published, Redis hung, or the connection
					// gone without a word: the wait was bounded.
					if quiet >= 0 {
						quiet++
					}
					switch {
					case quiet < 0:
						pctx, pcancel := context.WithTimeout(ctx, eventWait)
						_ = s.Ping(pctx) // a write error has it reconnect already
						pcancel()
						quiet = 0
					case quiet >= pingUnanswered:
						e.Log.WarnContext(ctx, "lease events: no answer to a ping; subscribing again")
						mu.Lock()
						if ctx.Err() == nil {
							sub = subscribe()
						}
						mu.Unlock()
						_ = s.Close()
						quiet = -1
					}
					continue
				}
				failures++
				t := time.NewTimer(min(time.Duration(failures)*e.RetryEvery/4, e.RetryEvery))
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				continue
			}
			failures = 0
			quiet = -1 // the connection answers
			if m, ok := msg.(*redis.Message); ok {
				select {
				case wake <- m.Payload:
				default:
				}
			}
		}
	}()
	return func() {
		cancel()
		mu.Lock()
		_ = sub.Close() // ends a read in progress
		mu.Unlock()
		<-done
	}
}

// lead holds the lease: it runs Lead under a leader context and renews in
// the background, self-fencing when renewals stop landing. acquiredAt is the
// monotonic time the acquire was sent: the lease is only sure until
// acquiredAt+TTL, whatever the network did.
func (e *Elector) lead(ctx context.Context, acquiredAt time.Time, wake <-chan string) error {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e.mu.Lock()
	e.leading, e.renewed = true, acquiredAt
	e.mu.Unlock()
	log := e.Log.With("lease", e.Lease.key)
	log.InfoContext(ctx, "lease acquired", "ttl", e.Lease.ttl.String())

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.keep(lctx, cancel, acquiredAt, wake, log)
	}()
	e.Lead(lctx)
	cancel(ErrSteppedDown) // the first cause stands: this one only if Lead returned on its own
	wg.Wait()
	cause := context.Cause(lctx)
	e.mu.Lock()
	e.leading, e.progress = false, time.Now()
	e.mu.Unlock()
	// Release unless the lease is already somebody else's. A process
	// stopping (ctx done) or handing over releases at once, so a standby
	// takes over in well under the TTL.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer rcancel()
	if !errors.Is(cause, ErrLost) {
		if ok, err := e.Lease.Release(rctx); err != nil {
			log.WarnContext(rctx, "lease release failed; it will expire", "err", err)
		} else if ok && e.Channel != "" {
			e.Lease.rdb.Publish(rctx, e.Channel, EventReleased)
		}
	}
	log.InfoContext(rctx, "leadership ended", "cause", causeString(cause))
	return cause
}

func causeString(err error) string {
	if err == nil {
		return "lead returned"
	}
	return err.Error()
}

// campaignBound is how long one campaign may wait on Redis.
func (e *Elector) campaignBound() time.Duration {
	return max(redisbound.Slack, e.Lease.ttl-e.Margin)
}

// keep renews the lease and ends leadership when it must.
func (e *Elector) keep(ctx context.Context, end context.CancelCauseFunc, sureUntilFrom time.Time, wake <-chan string, log *slog.Logger) {
	renew := time.NewTicker(e.RenewEvery)
	defer renew.Stop()
	// The fence: step down Margin before the lease could have expired,
	// counted from the send time of the last renewal that landed.
	fenceAt := sureUntilFrom.Add(e.Lease.ttl - e.Margin)
	fence := time.NewTimer(time.Until(fenceAt))
	defer fence.Stop()
	stepDown := func() {
		log.ErrorContext(ctx, "lease not renewed in time; stepping down before it can expire")
		end(ErrExpiring)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-fence.C:
			stepDown()
			return
		case ev := <-wake:
			if ev == EventHandover {
				log.InfoContext(ctx, "handover requested")
				end(ErrHandover)
				return
			}
		case <-renew.C:
			sent := time.Now()
			// A renewal never outlives the fence: against a Redis that
			// accepts the command and never answers (a partition, a hung
			// server), waiting out RenewEvery could carry the leader past
			// the moment its lease may expire, the fence timer unread.
			deadline := sent.Add(e.RenewEvery)
			if fenceAt.Before(deadline) {
				deadline = fenceAt
			}
			rctx, cancel := context.WithDeadline(ctx, deadline)
			ok, err := e.Lease.Renew(rctx)
			cancel()
			switch {
			case err != nil && !time.Now().Before(fenceAt):
				log.WarnContext(ctx, "lease renewal failed", "err", err)
				stepDown()
				return
			case err != nil:
				log.WarnContext(ctx, "lease renewal failed", "err", err)
			case !ok:
				log.ErrorContext(ctx, "lease lost")
				end(ErrLost)
				return
			default:
				e.progressed(sent, true)
				fenceAt = sent.Add(e.Lease.ttl - e.Margin)
				fence.Reset(time.Until(fenceAt))
			}
		}
	}
}

// RequestHandover asks the leader (whoever it is) to hand the lease over.
func RequestHandover(ctx context.Context, rdb redis.UniversalClient, channel string) (int64, error) {
	return rdb.Publish(ctx, channel, EventHandover).Result()
}
