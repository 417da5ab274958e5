package broker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the broker's Prometheus collectors.
type Metrics struct {
	links        prometheus.Gauge
	offers       *prometheus.CounterVec
	quality      *prometheus.CounterVec
	events       prometheus.Counter
	ended        *prometheus.CounterVec
	withdrawals  prometheus.Counter
	writeRetries prometheus.Counter
	// writeFailures: writes given up after StoreRetryFor (the leader
	// stepped down).
	writeFailures prometheus.Counter
	backpressure  prometheus.Counter
	queryWaits    prometheus.Counter
	storeSecs     prometheus.Counter
	publishSecs   prometheus.Counter
	waiting       *waitingCollector
	isLeader      prometheus.Gauge
	epoch         prometheus.Gauge
	lanes         *laneCollector
	refusals      *prometheus.CounterVec
	badEvents     *prometheus.CounterVec
	// queryBudget: queries that waited for the broker-wide query budget,
	// by how the wait ended (queries.go).
	queryBudget *prometheus.CounterVec
	// budgetWaiting: provider requests (queries, registers) waiting for
	// the budget now.
	budgetWaiting prometheus.Gauge
}

// NewMetrics makes the collectors and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		links: prometheus.NewGauge(prometheus.GaugeOpts{Name: "funduq_broker_provider_links",
			Help: "Open provider links."}),
		offers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "funduq_broker_offers_total",
			Help: "Offers sent and their outcomes (sent, accepted, declined, refused, unanswered; withdrawn: taken back because the record refused its offering write)."}, []string{"outcome"}),
		quality: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "funduq_broker_quality_counts_total",
			Help: "Quality counters recorded against providers, by counter."}, []string{"counter"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_broker_events_relayed_total",
			Help: "Provider events stored and relayed."}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "funduq_broker_runs_ended_total",
			Help: "Runs whose lane ended, by the status written."}, []string{"status"}),
		withdrawals: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_broker_withdrawals_total",
			Help: "Providers withdrawn from service at tolerance."}),
		writeRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_broker_store_write_retries_total",
			Help: "Store writes retried after a transient failure."}),
		writeFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_broker_store_write_failures_total",
			Help: "Store writes given up after FUNDUQ_STORE_RETRY_FOR of failures; the leader stepped down each time."}),
		backpressure: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_broker_link_backpressure_total",
			Help: "Times a provider link's read loop waited because its event backlog was full."}),
		queryWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_broker_link_query_waits_total",
			Help: "Times a provider link's read loop waited because every one of its query slots was taken."}),
		queryBudget: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "funduq_broker_query_budget_waits_total",
			Help: "Provider queries that waited because the broker-wide query budget (half the PostgreSQL pool) was taken, by outcome (served; gave_up: answered busy at the query's time limit)."}, []string{"outcome"}),
		budgetWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "funduq_broker_query_budget_waiting",
			Help: "Provider requests (queries, registers' writes) waiting now for the broker-wide query budget (half the PostgreSQL pool)."}),
		storeSecs: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_broker_event_store_seconds_total",
			Help: "Time the lanes spent storing provider event batches (retries included)."}),
		publishSecs: prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_broker_event_publish_seconds_total",
			Help: "Time the lanes spent publishing stored events to the live feed."}),
		waiting: &waitingCollector{desc: prometheus.NewDesc("funduq_broker_events_waiting",
			"Provider events read and not yet stored.", nil, nil)},
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "funduq_broker_is_leader",
			Help: "1 while this node leads."}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "funduq_broker_epoch",
			Help: "The epoch this node last led under."}),
		lanes: &laneCollector{desc: prometheus.NewDesc("funduq_broker_lanes",
			"Active run lanes, by the run's status.", []string{"status"}, nil)},
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "funduq_broker_reports_refused_total",
			Help: "Provider reports (ack, event, finish) not taken and answered with an error frame, by kind and reason."}, []string{"kind", "reason"}),
		badEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "funduq_broker_provider_events_refused_total",
			Help: "Provider events that failed their run (malformed, oversized, over the per-run limit), by reason. Counts no quality counter."}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.links, m.offers, m.quality, m.events, m.ended, m.withdrawals, m.writeRetries, m.writeFailures, m.backpressure, m.queryWaits, m.queryBudget, m.budgetWaiting, m.storeSecs, m.publishSecs, m.waiting,
			m.isLeader, m.epoch, m.lanes, m.refusals, m.badEvents)
	}
	return m
}

func (m *Metrics) bind(b *Broker) { m.lanes.b, m.waiting.b = b, b }

type waitingCollector struct {
	desc *prometheus.Desc
	b    *Broker
}

func (c *waitingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *waitingCollector) Collect(ch chan<- prometheus.Metric) {
	if c.b == nil {
		return
	}
	total, _ := c.b.EventsWaiting()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(total))
}

func (m *Metrics) leading(epoch int64, on bool) {
	m.epoch.Set(float64(epoch))
	if on {
		m.isLeader.Set(1)
	} else {
		m.isLeader.Set(0)
		m.links.Set(0)
	}
}

type laneCollector struct {
	desc *prometheus.Desc
	b    *Broker
}

func (c *laneCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *laneCollector) Collect(ch chan<- prometheus.Metric) {
	if c.b == nil {
		return
	}
	// The lanes alone, counted under the lock: a Snapshot would also sort
	// every served agent at each scrape.
	counts := map[string]int{}
	c.b.mu.Lock()
	for _, l := range c.b.lanes {
		counts[string(l.status)]++
	}
	c.b.mu.Unlock()
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), st)
	}
}
