package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/funduq/funduq-go/broker-node/tickets"
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
// must not name its own in a ticket, as providers pin it. It also tells a
// takeover under way (§Deployment, "A takeover under way"): the lease is
// another node's than the one the row names.
type publishedKey struct {
	st      *store.Store
	mine    string
	log     *slog.Logger
	leading func() bool
	// holderNow reads who holds the lease now (its node ID, "" nobody).
	holderNow func(ctx context.Context) (string, error)
	// refused counts the tickets refused during a takeover.
	refused prometheus.Counter

	mu     sync.Mutex
	key    string
	holder string    // the leader row's holder when key was read
	epoch  int64     // the leader row's epoch when key was read
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
	// split is the lease holder a takeover under way was last logged for,
	// and splitEpoch the row's epoch then; splitting says one is logged
	// and its end not yet.
	split      string
	splitEpoch int64
	splitting  bool
}

// get returns the published key ("" while none is). The leader returns
// its own: it published it as it took its epoch. Another node refuses
// with tickets.ErrTakeover while the lease's holder is not the row's: the
// row names the node that led before and its key, and the next leader may
// answer to another (design.md §Deployment, "A takeover under way"). The
// lease is read with each request, bounded (it is in the same Redis as
// the tickets, so a node that cannot read it could issue none anyway);
// the row at most every publishedKeyTTL, and at once when the lease is
// not its holder's. A failed read of the row falls back on the last row
// read, however old (a key changes by a takeover, not by a database blip),
// unless the lease has moved since; with none, it is the error. One read
// at a time: the others wait for it.
func (p *publishedKey) get(ctx context.Context) (string, error) {
	if p.leading() {
		return p.mine, nil
	}
	holder, err := p.holderNow(ctx)
	if err != nil {
		return "", fmt.Errorf("read the lease's holder: %w", err)
	}
	key, rowHolder, err := p.row(ctx, holder)
	if err != nil {
		return "", err
	}
	if holder != rowHolder {
		p.refused.Inc()
		return "", tickets.ErrTakeover
	}
	return key, nil
}

// row returns the leader row's key and holder as last read, reading the
// row again first when that read is older than publishedKeyTTL or named
// another holder than the lease's now (holder).
func (p *publishedKey) row(ctx context.Context, holder string) (key, rowHolder string, err error) {
	p.mu.Lock()
	if !p.readAt.IsZero() && time.Since(p.readAt) < publishedKeyTTL && holder == p.holder {
		defer p.mu.Unlock()
		return p.afterReadLocked(ctx, holder, nil)
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
		if waitErr == nil {
			waitErr = p.readErr
		}
		return p.afterReadLocked(ctx, holder, waitErr)
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
	if err == nil {
		p.observeLocked(ctx, l)
	}
	return p.afterReadLocked(ctx, holder, err)
}

// afterReadLocked answers with the row as last read once a read ended
// with err (nil: it succeeded), and records whether the lease's holder
// now (holder) is that row's. A failed read falls back on the last row
// read, unless there is none or the lease has moved since it was read:
// that row is known to be stale, and the error stands.
func (p *publishedKey) afterReadLocked(ctx context.Context, holder string, err error) (key, rowHolder string, _ error) {
	if err != nil && (p.readAt.IsZero() || holder != p.holder) {
		return "", "", err
	}
	p.leaseLocked(ctx, holder)
	return p.key, p.holder, nil
}

// observe records the leader row read elsewhere (/readyz reads it), and
// reports whether the key it published is this node's (or none). With
// the lease's holder read beside it (holderRead), it also reports whether
// the two disagree: a takeover is under way.
func (p *publishedKey) observe(ctx context.Context, l store.Leader, holder string, holderRead bool) (keyOK, underWay bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observeLocked(ctx, l)
	if holderRead {
		p.leaseLocked(ctx, holder)
	}
	return l.FunduqKey == "" || l.FunduqKey == p.mine, holderRead && holder != l.Holder
}

// observeLocked caches the row and logs a change of verdict on its key:
// an ERROR naming both public keys when it is another than this node's
// (once per published key, not per request), an INFO when they agree
// again.
func (p *publishedKey) observeLocked(ctx context.Context, l store.Leader) {
	key := l.FunduqKey
	p.key, p.holder, p.epoch, p.readAt = key, l.Holder, l.Epoch, time.Now()
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

// leaseLocked compares the lease's holder now with the row's as last read
// and logs a change: a WARN with the row's epoch and both holders when a
// takeover is seen under way (once per lease holder and epoch, not per
// request), an INFO when the row names the lease's holder again. A spell
// that lasts is a new leader that cannot write the row (it gives the
// lease up after FUNDUQ_STORE_RETRY_FOR) or nobody holding the lease.
func (p *publishedKey) leaseLocked(ctx context.Context, holder string) {
	switch {
	case holder != p.holder && (!p.splitting || holder != p.split || p.epoch != p.splitEpoch):
		p.split, p.splitEpoch, p.splitting = holder, p.epoch, true
		p.log.WarnContext(ctx, "a takeover is under way: the lease's holder is not the leader row's; "+
			"this node issues no tickets until the row names the lease's holder",
			"epoch", p.epoch, "lease_holder", holder, "row_holder", p.holder)
	case holder == p.holder && p.splitting:
		p.splitting = false
		p.log.InfoContext(ctx, "the leader row names the lease's holder again: issuing tickets",
			"epoch", p.epoch, "holder", holder)
	}
}
