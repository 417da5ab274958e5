package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// QueryBudget is how many of a pool of poolSize connections provider
// queries may hold at once, over every link: half, and at least one. The
// rest are the lanes' (claims, events, ends), so slow queries — a stranger's
// included — never hold every connection (design.md §The provider wire,
// "Admission"). A pool of one leaves the lanes nothing; the node refuses it.
func QueryBudget(poolSize int) int {
	return max(1, poolSize/2)
}

// ErrNoSuchThread answers a query for a thread that is missing or not this
// provider's: the same answer for both, so a key learns nothing of others.
var ErrNoSuchThread = errors.New("no such thread for this provider")

// ErrQueriesBusy answers a query that waited its whole time limit for the
// broker-wide query budget: other queries held it throughout.
var ErrQueriesBusy = errors.New(wire.QueryBusyMessage)

// ThreadMessages answers a provider's thread_messages query with at most
// maxBytes of messages; more is store.ErrTooLarge. It reads only within
// the query budget, waiting for it until ctx ends (ErrQueriesBusy).
func (b *Broker) ThreadMessages(ctx context.Context, l Link, threadID string, limit, maxBytes int) ([]json.RawMessage, error) {
	if err := b.takeQuery(ctx, l, threadID); err != nil {
		return nil, err
	}
	defer func() { <-b.queries }()
	t, err := b.st.GetThread(ctx, threadID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && t.ProviderKey != l.Key()) {
		return nil, ErrNoSuchThread
	}
	if err != nil {
		return nil, err
	}
	return b.st.ThreadMessagesWithin(ctx, threadID, limit, maxBytes)
}

// takeQuery takes a place in the query budget for a query, waiting (in
// turn: a channel's senders are served first come, first served) until ctx
// ends. The wait is the query's, off its link's read loop: the link's own
// query slots bound how many of its queries wait, and a link waits for
// those as before (Stalled), so one key's queries never stop another link
// being read.
func (b *Broker) takeQuery(ctx context.Context, l Link, threadID string) error {
	waited, err := b.takeBudget(ctx, nil)
	switch {
	case err == nil && waited:
		b.metrics.queryBudget.WithLabelValues("served").Inc()
	case err != nil:
		b.metrics.queryBudget.WithLabelValues("gave_up").Inc()
		b.log.WarnContext(ctx, "provider query gave up waiting for the query budget", "provider_key", l.Key(),
			"thread_id", threadID, "epoch", b.writeEpoch.Load(), "query_budget", cap(b.queries), "err", err)
		return fmt.Errorf("%w: %w", ErrQueriesBusy, err)
	}
	return nil
}

// takeBudget takes a place in the query budget, waiting in turn until ctx
// ends (its error) or stop closes (ErrNotLeading); waited says it had to
// wait. A register's writes take their place here too (Register): they run
// on their link's read loop, one per link, so as many links as the pool
// has connections would otherwise hold all of them while PostgreSQL is
// slow to answer.
func (b *Broker) takeBudget(ctx context.Context, stop <-chan struct{}) (waited bool, err error) {
	select {
	case b.queries <- struct{}{}:
		return false, nil
	default:
	}
	b.metrics.budgetWaiting.Inc()
	defer b.metrics.budgetWaiting.Dec()
	select {
	case b.queries <- struct{}{}:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	case <-stop:
		return true, ErrNotLeading
	}
}
