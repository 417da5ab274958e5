package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

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
	defer b.queries.give()
	t, err := b.st.GetThread(ctx, threadID)
	// A thread id PostgreSQL refuses as data (a NUL) names no thread
	// stored: it is answered as any other, not as a read to ask again.
	if errors.Is(err, store.ErrNotFound) || refusedData(err) || (err == nil && t.ProviderKey != l.Key()) {
		return nil, ErrNoSuchThread
	}
	if err != nil {
		return nil, err
	}
	return b.st.ThreadMessagesWithin(ctx, threadID, limit, maxBytes)
}

// takeQuery takes a place in the query budget for a query, waiting (in
// turn, after any register waiting) until ctx ends. The wait is the query's, off its link's read loop: the link's own
// query slots bound how many of its queries wait, and a link waits for
// those as before (Stalled), so one key's queries never stop another link
// being read.
func (b *Broker) takeQuery(ctx context.Context, l Link, threadID string) error {
	waited, err := b.takeBudget(ctx, nil, false)
	switch {
	case err == nil && waited:
		b.metrics.queryBudget.WithLabelValues("served").Inc()
	case err != nil:
		b.metrics.queryBudget.WithLabelValues("gave_up").Inc()
		b.log.WarnContext(ctx, "provider query gave up waiting for the query budget", "provider_key", l.Key(),
			"thread_id", threadID, "epoch", b.writeEpoch.Load(), "query_budget", b.queries.size, "err", err)
		return fmt.Errorf("%w: %w", ErrQueriesBusy, err)
	}
	return nil
}

// takeBudget takes a place in the query budget, waiting until ctx ends
// (its error) or stop closes (ErrNotLeading); waited says it had to wait. A
// register's writes take their place here too (registerWrites): they run on
// their link's read loop, one per link, so as many links as the pool has
// connections would otherwise hold all of them while PostgreSQL is slow to
// answer; first (a register) is served before every query waiting.
func (b *Broker) takeBudget(ctx context.Context, stop <-chan struct{}, first bool) (waited bool, err error) {
	return b.queries.take(ctx, stop, first, b.metrics.budgetWaiting)
}

// budget hands out places in turn, those asked for first (registers)
// before the rest (queries): a query waits at most its time limit and may
// be asked again, where a register a new provider waits for has a deadline
// and its writes take their place for as long as they last.
type budget struct {
	mu   sync.Mutex
	size int
	free int
	// waiting: [0] first, [1] the rest; each closed when handed a place.
	waiting [2][]chan struct{}
}

func newBudget(size int) *budget { return &budget{size: size, free: size} }

func (q *budget) take(ctx context.Context, stop <-chan struct{}, first bool, gauge prometheus.Gauge) (bool, error) {
	q.mu.Lock()
	if q.free > 0 {
		q.free--
		q.mu.Unlock()
		return false, nil
	}
	i := 1
	if first {
		i = 0
	}
	ch := make(chan struct{})
	q.waiting[i] = append(q.waiting[i], ch)
	q.mu.Unlock()
	gauge.Inc()
	defer gauge.Dec()
	var err error
	select {
	case <-ch:
		return true, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = ErrNotLeading
	}
	q.mu.Lock()
	if k := slices.Index(q.waiting[i], ch); k >= 0 {
		q.waiting[i] = slices.Delete(q.waiting[i], k, k+1)
		q.mu.Unlock()
		return true, err
	}
	q.mu.Unlock()
	q.give() // handed a place as it gave up: the next waiter's
	return true, err
}

// give hands a place back: to the longest waiter of the first kind, else of
// the rest, else to the free ones.
func (q *budget) give() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.waiting {
		if len(q.waiting[i]) > 0 {
			ch := q.waiting[i][0]
			q.waiting[i] = q.waiting[i][1:]
			close(ch)
			return
		}
	}
	q.free++
}
