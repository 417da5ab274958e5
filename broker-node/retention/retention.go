// Package retention is the leader's maintenance service that deletes
// settled runs older than FUNDUQ_RETENTION (store.PruneBatch): every
// Interval it deletes batch after batch until a batch comes back short,
// pausing between batches so it never competes with the hot path for
// long; each batch is counted in the metrics and logged.
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
	Deleted *prometheus.CounterVec // by what: runs, events, messages, answer_requests, threads
	Batches prometheus.Counter
	Errors  prometheus.Counter
}

// NewMetrics registers the retention metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "funduq_retention_deleted_total",
			Help: "Rows retention deleted, by what (runs, events, messages, answer_requests, threads)."}, []string{"what"}),
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

// Cleaner deletes settled runs older than Retention.
type Cleaner struct {
	Store     *store.Store
	Retention time.Duration
	Batch     int           // runs per batch (default 500)
	Interval  time.Duration // between passes (default 1m)
	Pause     time.Duration // between batches of one pass (default 100ms; tests 0)
	Log       *slog.Logger
	Metrics   *Metrics
	Now       func() time.Time
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
		c.Now = time.Now
	}
}

// Pass deletes batches until one comes back short (nothing is left older
// than the cutoff taken at its start) or ctx ends; it returns the total.
func (c *Cleaner) Pass(ctx context.Context) (store.Pruned, error) {
	c.defaults()
	cutoff := c.Now().Add(-c.Retention)
	var total store.Pruned
	for {
		p, err := c.Store.PruneBatch(ctx, cutoff, c.Batch)
		if err != nil && ctx.Err() != nil {
			// Leadership ended (a handover, a shutdown): the batch rolled
			// back and the next leader's pass deletes the rest; no failure.
			c.Log.InfoContext(ctx, "retention pass stopped", "cutoff", cutoff)
			return total, ctx.Err()
		}
		if err != nil {
			c.Metrics.Errors.Inc()
			c.Log.WarnContext(ctx, "retention batch failed", "err", err, "cutoff", cutoff)
			return total, err
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
		if c.Pause > 0 {
			t := time.NewTimer(c.Pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return total, ctx.Err()
			case <-t.C:
			}
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
