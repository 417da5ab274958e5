package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/funduq/funduq-go/core/store"
)

// publishedKeyTTL is how long a node takes the leader's published identity
// key it read as current while the lease holder is still the leader row's
// holder it read with it: a ticket request costs no PostgreSQL round trip
// of its own (its /readyz reads the leader of record anyway and refreshes
// it). A takeover changes the lease holder first, and the next ticket
// reads the row again (design.md §Deployment, "One identity key").
const publishedKeyTTL = 5 * time.Second

// publishedKeyReadTimeout bounds one read of the leader row for a ticket.
const publishedKeyReadTimeout = time.Second

// publishedKey is what a node knows of the key the leader of record
// published (broker_leader.funduq_key, design.md §Deployment, "One
// identity key"), for POST /tickets and /readyz: a node on another key
// must not name its own in a ticket, as providers pin it.
type publishedKey struct {
	st      *store.Store
	mine    string
	log     *slog.Logger
	leading func() bool
	// holderNow reads who holds the lease now (its node ID, "" nobody).
	holderNow func(ctx context.Context) (string, error)

	mu     sync.Mutex
	key    string
	holder string    // the leader row's holder when key was read
	readAt time.Time // zero: never read
	// reading is closed when the read in flight ends (nil: none). Requests
	// arriving while the cache is stale wait on it, each up to its own
	// deadline, and take its outcome — a failed one too — instead of
	// queueing for reads of their own: behind a stalled row (a
	// migration's lock request queued on broker_leader) those queued reads
	// spent every later request's IssueTimeout, and a burst of tickets
	// became 503s although the key read last was at hand.
	reading chan struct{}
	readErr error // the last read's failure (nil: it succeeded)
	// reported is the published key the last ERROR named ("" none).
	reported string
}

// get returns the published key ("" while none is). The leader returns
// its own: it published it as it took its epoch. A failed read falls back
// on the last key read, however old (a key changes by a takeover, not by
// a database blip); with none, it is the error. One read at a time: the
// others wait for it (design.md §Deployment, "One identity key").
func (p *publishedKey) get(ctx context.Context) (string, error) {
	if p.leading() {
		return p.mine, nil
	}
	// Between a takeover and the next read the row names the node that
	// led before, and the key it published: a lease held by another node
	// than that (or by none, between leaders) makes the key read stale at
	// once. The ALB fails open to standbys exactly then, and a standby that
	// named the old key in a ticket had the provider refuse the new leader.
	holder, herr := p.holderNow(ctx)
	p.mu.Lock()
	if !p.readAt.IsZero() && time.Since(p.readAt) < publishedKeyTTL && (herr != nil || holder == p.holder) {
		defer p.mu.Unlock()
		return p.key, nil
	}
	if done := p.reading; done != nil {
		p.mu.Unlock()
		var waitErr error
		select {
		case <-done:
		case <-ctx.Done():
			waitErr = ctx.Err()
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if waitErr != nil {
			return p.fallbackLocked(waitErr)
		}
		return p.fallbackLocked(p.readErr)
	}
	done := make(chan struct{})
	p.reading = done
	p.mu.Unlock()
	// Not under this request's cancellation: the others waiting take
	// this read's outcome.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishedKeyReadTimeout)
	l, err := p.st.CurrentLeader(rctx)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reading, p.readErr = nil, err
	close(done)
	if err != nil {
		return p.fallbackLocked(err)
	}
	p.observeLocked(ctx, l.FunduqKey, l.Holder)
	return p.key, nil
}

// fallbackLocked answers after a read that failed with err (nil: it
// succeeded): the last key read, if any.
func (p *publishedKey) fallbackLocked(err error) (string, error) {
	if err != nil && p.readAt.IsZero() {
		return "", err
	}
	return p.key, nil
}

// observe records a published key read elsewhere (/readyz reads the
// leader row), with the row's holder, and reports whether it is this
// node's (or none).
func (p *publishedKey) observe(ctx context.Context, key, holder string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observeLocked(ctx, key, holder)
	return key == "" || key == p.mine
}

// observeLocked caches key and logs a change of verdict: an ERROR naming
// both public keys when it is another than this node's (once per
// published key, not per request), an INFO when they agree again.
func (p *publishedKey) observeLocked(ctx context.Context, key, holder string) {
	p.key, p.holder, p.readAt = key, holder, time.Now()
	switch {
	case key != "" && key != p.mine && key != p.reported:
		p.reported = key
		p.log.ErrorContext(ctx, "FUNDUQ_IDENTITY_KEY differs from the key the leader published: this node issues no tickets "+
			"and is not ready; set the same key on every broker node and door",
			"funduq_key", p.mine, "published_funduq_key", key)
	case (key == "" || key == p.mine) && p.reported != "":
		p.reported = ""
		p.log.InfoContext(ctx, "the published identity key is this node's again: issuing tickets", "funduq_key", p.mine)
	}
}
