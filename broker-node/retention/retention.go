// Package retention is the leader's maintenance service that deletes
// settled runs older than FUNDUQ_RETENTION (store.PruneBatch), and the
// agents and providers records nobody has served for FUNDUQ_AGENT_RETENTION
// (store.PruneRecordsBatch): every Interval it deletes batch after batch
// until a batch comes back short, pausing between batches so it never
// competes with the hot path for long; each batch is counted in the
// metrics and logged.
package retention

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/funduq/funduq-go/core/store"
)

// Metrics count what retention deleted.
type Metrics struct {
	Deleted *prometheus.CounterVec // by what: runs, events, messages, answer_requests, threads, agents, providers
	Batches prometheus.Counter
	Errors  prometheus.Counter
}

// NewMetrics registers the retention metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "funduq_retention_deleted_total",
			Help: "Rows retention deleted, by what (runs, events, messages, answer_requests, threads, agents, providers)."}, []string{"what"}),
		Batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_retention_batches_total",
			Help: "Retention batches committed."}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_retention_errors_total",
			Help: "Retention batches that failed (retried at the next interval)."}),
	}
	if reg != nil {
		reg.MustRegister(m.Deleted, m.Batches, m.Errors)
	}
	return m
}

// Cleaner deletes settled runs older than Retention, and the records
// nobody has served for AgentRetention.
type Cleaner struct {
	Store     *store.Store
	Retention time.Duration // 0: runs are kept
	// AgentRetention is records retention's horizon (0: records kept).
	AgentRetention time.Duration
	Batch          int           // runs, or provider keys, per batch (default 500)
	Interval       time.Duration // between passes (default 1m)
	Pause          time.Duration // between batches of one pass (default 100ms; tests 0)
	Log            *slog.Logger
	Metrics        *Metrics
	// Now is the clock a pass takes its cutoff from; nil reads
	// PostgreSQL's (store.Now). The times it is compared with
	// (completed_at, last_activity_at, last_served_at) are PostgreSQL's:
	// a cutoff from a node whose clock runs fast would delete runs that
	// settled moments ago (design.md §Retention).
	Now func(ctx context.Context) (time.Time, error)
}

func (c *Cleaner) defaults() {
	if c.Batch <= 0 {
		c.Batch = 500
	}
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Now == nil {
		c.Now = c.Store.Now
	}
}

// Pass deletes batches until one comes back short (nothing is left older
// than the cutoff taken at its start) or ctx ends, settled runs first (a
// run gone may leave its agent with no conversation), then records; it
// returns the total.
func (c *Cleaner) Pass(ctx context.Context) (store.Pruned, error) {
	c.defaults()
	var total store.Pruned
	if c.Retention > 0 {
		p, err := c.passRuns(ctx)
		total = total.Add(p)
		if err != nil {
			return total, err
		}
	}
	if c.AgentRetention > 0 {
		p, err := c.passRecords(ctx)
		total = total.Add(p)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// failed accounts for a batch's error: none when ctx ended (leadership
// ended, a handover or a shutdown: the batch rolled back and the next
// leader's pass deletes the rest), a failure otherwise.
func (c *Cleaner) failed(ctx context.Context, err error, what string, cutoff time.Time) error {
	if ctx.Err() != nil {
		c.Log.InfoContext(ctx, "retention pass stopped", "what", what, "cutoff", cutoff)
		return ctx.Err()
	}
	c.Metrics.Errors.Inc()
	c.Log.WarnContext(ctx, "retention batch failed", "what", what, "err", err, "cutoff", cutoff)
	return err
}

// pause waits between two batches of a pass.
func (c *Cleaner) pause(ctx context.Context) error {
	if c.Pause <= 0 {
		return nil
	}
	t := time.NewTimer(c.Pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// passRecords walks every provider key in batches (store.PruneRecordsBatch).
func (c *Cleaner) passRecords(ctx context.Context) (store.Pruned, error) {
	var total store.Pruned
	now, err := c.Now(ctx)
	if err != nil {
		return total, c.failed(ctx, err, "records", time.Time{})
	}
	cutoff := now.Add(-c.AgentRetention)
	after := ""
	for {
		p, err := c.Store.PruneRecordsBatch(ctx, cutoff, after, c.Batch)
		if err != nil {
			return total, c.failed(ctx, err, "records", cutoff)
		}
		total = total.Add(store.Pruned{Agents: p.Agents, Providers: p.Providers})
		if p.Agents > 0 || p.Providers > 0 {
			c.Metrics.Batches.Inc()
			c.Metrics.Deleted.WithLabelValues("agents").Add(float64(p.Agents))
			c.Metrics.Deleted.WithLabelValues("providers").Add(float64(p.Providers))
			c.Log.InfoContext(ctx, "retention deleted records nobody served", "agents", p.Agents, "providers", p.Providers,
				"cutoff", cutoff, "agent_retention", c.AgentRetention.String())
		}
		if p.Done {
			return total, nil
		}
		after = p.Next
		if err := c.pause(ctx); err != nil {
			return total, err
		}
	}
}

// passRuns deletes settled runs in batches (store.PruneBatch).
func (c *Cleaner) passRuns(ctx context.Context) (store.Pruned, error) {
	var total store.Pruned
	now, err := c.Now(ctx)
	if err != nil {
		return total, c.failed(ctx, err, "runs", time.Time{})
	}
	cutoff := now.Add(-c.Retention)
	for {
		p, err := c.Store.PruneBatch(ctx, cutoff, c.Batch)
		if err != nil {
			return total, c.failed(ctx, err, "runs", cutoff)
		}
		total = total.Add(p)
		if p.Runs > 0 {
			c.Metrics.Batches.Inc()
			for what, n := range map[string]int64{"runs": p.Runs, "events": p.Events, "messages": p.Messages,
				"answer_requests": p.AnswerRequests, "threads": p.Threads} {
				c.Metrics.Deleted.WithLabelValues(what).Add(float64(n))
			}
			c.Log.InfoContext(ctx, "retention deleted settled runs", "runs", p.Runs, "events", p.Events,
				"messages", p.Messages, "answer_requests", p.AnswerRequests, "threads", p.Threads,
				"cutoff", cutoff, "retention", c.Retention.String())
		}
		if p.Runs < int64(c.Batch) {
			return total, nil
		}
		if err := c.pause(ctx); err != nil {
			return total, err
		}
	}
}

// Start runs a pass at once and then every Interval until ctx ends; stop
// ends it and waits for it.
func (c *Cleaner) Start(ctx context.Context) (stop func()) {
	c.defaults()
	if c.Pause == 0 {
		c.Pause = 100 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(c.Interval)
		defer t.Stop()
		for {
			_, _ = c.Pass(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}
