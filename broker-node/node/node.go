package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/console"
	"github.com/funduq/funduq-go/broker-node/intake"
	"github.com/funduq/funduq-go/broker-node/kyokrelay"
	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/broker-node/link"
	"github.com/funduq/funduq-go/broker-node/retention"
	"github.com/funduq/funduq-go/broker-node/tickets"
	"github.com/funduq/funduq-go/broker-node/wsconn"
	"github.com/funduq/funduq-go/core/apierr"
	"github.com/funduq/funduq-go/core/backoff"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/redisbound"
	"github.com/funduq/funduq-go/core/store"
)

// KeyPrefix namespaces every Redis key funduq writes.
const KeyPrefix = "funduq:"

// Node is one broker node process.
type Node struct {
	cfg      config.Broker
	log      *slog.Logger
	st       *store.Store
	rdb      *redis.Client
	signer   *identity.Signer
	tickets  *tickets.Store
	Broker   *broker.Broker
	links    *link.Server
	registry *prometheus.Registry
	mux      *http.ServeMux
	prefix   string
	elector  *lease.Elector
	kyok     *kyokrelay.Relay
	// published is the leader's published identity key as this node last
	// read it (POST /tickets, /readyz).
	published *publishedKey
	// idWatch tells another live process under this node's id (/readyz).
	idWatch *console.IDWatch
	// IntakePoll overrides the intake safety poll (tests).
	IntakePoll time.Duration

	// retention is the leader's pruning of settled runs and unserved
	// records (nil when both are off).
	retention *retention.Cleaner
	// watchdogClock times systemd's watchdog pings (notify.go).
	watchdogClock clockwork.Clock
	// heartbeatFailing is 1 while the leader's heartbeat is being retried
	// (heartbeat): PostgreSQL out of its reach.
	heartbeatFailing prometheus.Gauge
	// storeLost: this node last stepped down for want of PostgreSQL
	// (reachesStore).
	storeLost atomic.Bool
}

// LeaseKey and LeaseChannel are the lease's Redis key and event channel
// under a key prefix.
func LeaseKey(prefix string) string     { return prefix + "broker:lease" }
func LeaseChannel(prefix string) string { return prefix + "broker:lease:events" }

// NodesKey is the Redis hash each node announces itself in (the console's
// "nodes seen").
func NodesKey(prefix string) string { return prefix + "broker:nodes" }

// ConsoleEndedKey prefixes the Redis keys of the console sessions logged
// out before their time (see console.Options.EndedKey).
func ConsoleEndedKey(prefix string) string { return prefix + "broker:console:ended:" }

// Options are what New needs beyond the configuration.
type Options struct {
	Logger *slog.Logger
	Clock  clockwork.Clock // nil: the real clock
	// RedisPrefix overrides KeyPrefix (tests share one Redis).
	RedisPrefix string
	// SweepInterval overrides the broker's sweep tick.
	SweepInterval time.Duration
	// KyokGap and KyokBlock override the KYOK relay's 120 s gap between a
	// completion's frames and its Redis read block (tests).
	KyokGap, KyokBlock time.Duration
	// LinkPingInterval overrides how often provider links are pinged
	// (wsconn.PingEvery; tests).
	LinkPingInterval time.Duration
	// LinkWriteTimeout overrides the bound on one frame's write to a
	// provider link (10 s; tests).
	LinkWriteTimeout time.Duration
	// QueryTimeout overrides a provider query's 10 s time limit (tests).
	QueryTimeout time.Duration
	// WatchdogClock times systemd's watchdog pings and is the time each
	// checks the lease elector at (notify.go); nil: the real clock. The
	// elector runs on real time, so a test's clock starts at time.Now().
	WatchdogClock clockwork.Clock
}

// New connects a node to its stores. It refuses a database whose schema is
// not the one this binary embeds (run `broker-node migrate`).
func New(ctx context.Context, cfg config.Broker, o Options) (*Node, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", cfg.NodeID)
	signer, err := identity.NewSignerFromSeedHex(cfg.IdentityKey)
	if err != nil {
		return nil, fmt.Errorf("FUNDUQ_IDENTITY_KEY: %w", err)
	}
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{Log: log, MaxConns: int32(cfg.DBMaxConns), ApplicationName: "funduq-broker"})
	if err != nil {
		return nil, err
	}
	if err := st.CheckSchema(ctx); err != nil {
		st.Close()
		return nil, err
	}
	// Provider queries get half the pool and the lanes the rest
	// (broker.QueryBudget): one connection cannot be split.
	pool := int(st.Pool().Config().MaxConns)
	if pool < 2 {
		st.Close()
		return nil, fmt.Errorf("FUNDUQ_DB_MAX_CONNS (or the database URL's pool_max_conns): want a pool of at least 2 connections, got %d", pool)
	}
	log.Info("provider queries hold part of the PostgreSQL pool", "pool", pool, "query_budget", broker.QueryBudget(pool))
	ropt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("FUNDUQ_REDIS_URL: %w", err)
	}
	// Contexts bound every Redis call: without this go-redis ignores their
	// deadlines (it keeps its own 3 s read timeout and retries), so a hung
	// Redis could hold a lease renewal past the fence (D10).
	ropt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(ropt)
	prefix := o.RedisPrefix
	if prefix == "" {
		prefix = cfg.RedisPrefix
	}
	if prefix == "" {
		prefix = KeyPrefix
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b := broker.New(broker.Options{Store: st, Feed: livefeed.New(rdb, prefix), Clock: o.Clock, Logger: log,
		Metrics: broker.NewMetrics(reg),
		Settings: broker.Settings{DeliverTimeout: cfg.DeliverTimeout, OfferingAfter: cfg.OfferingWriteAfter, UnservedTimeout: cfg.UnservedTimeout,
			UndeliveredWindow: cfg.UndeliveredWindow, ProviderGrace: cfg.ProviderGrace, LinkGrace: cfg.LinkGrace, LeaseTTL: cfg.LeaseTTL,
			QualityTolerance: cfg.ProviderQualityTolerance, StoreRetryFor: cfg.StoreRetryFor, SweepInterval: o.SweepInterval,
			Limits: broker.Limits{MaxEventsPerRun: cfg.MaxEventsPerRun, MaxEventBytes: cfg.MaxEventBytes, MaxServedAgents: cfg.MaxServedAgents,
				Register: broker.RegisterLimits{MaxAgents: cfg.MaxAgentsPerRegister, MaxDescriptionBytes: cfg.MaxAgentDescriptionBytes,
					MaxCardBytes: cfg.MaxAgentCardBytes, MaxTotalBytes: cfg.MaxRegisterBytes}},
			EventBacklog: cfg.LinkEventBacklog, EventBacklogBytes: cfg.LinkEventBacklogBytes}})
	n := &Node{cfg: cfg, log: log, st: st, rdb: rdb, signer: signer, tickets: tickets.New(rdb, prefix),
		Broker: b, registry: reg, prefix: prefix, watchdogClock: o.WatchdogClock}
	n.heartbeatFailing = prometheus.NewGauge(prometheus.GaugeOpts{Name: "funduq_leader_heartbeat_failing",
		Help: "1 while the leader's heartbeat write fails and is retried; after FUNDUQ_STORE_RETRY_FOR of it the leader steps down."})
	reg.MustRegister(n.heartbeatFailing)
	if n.watchdogClock == nil {
		n.watchdogClock = clockwork.NewRealClock()
	}
	if cfg.Retention > 0 || cfg.AgentRetention > 0 {
		n.retention = &retention.Cleaner{Store: st, Retention: cfg.Retention, AgentRetention: cfg.AgentRetention,
			Batch: cfg.RetentionBatch, Log: log, Metrics: retention.NewMetrics(reg)}
	}
	// One bound over both link endpoints (design.md §The provider wire,
	// "Admission").
	pendingRefused := prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_links_refused_pending_total",
		Help: "Link upgrades (/ws/provider, /ws/kyok) refused because FUNDUQ_MAX_PENDING_LINKS links had not registered."})
	pending := &wsconn.Pending{Max: cfg.MaxPendingLinks, Refused: pendingRefused.Inc}
	reg.MustRegister(pendingRefused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "funduq_links_pending",
		Help: "Links (/ws/provider, /ws/kyok) in the handshake or welcomed and not registered yet."},
		func() float64 { return float64(pending.Count()) }))
	n.links = &link.Server{Broker: b, Funduq: signer, Tickets: n.tickets, Log: log,
		NotLeading: http.HandlerFunc(n.notLeading), MaxFrame: cfg.MaxFrame, PingInterval: o.LinkPingInterval, WriteTimeout: o.LinkWriteTimeout,
		RegisterDeadline: cfg.RegisterDeadline, Clock: o.Clock, QueryTimeout: o.QueryTimeout, Pending: pending}
	n.kyok = &kyokrelay.Relay{Store: st, Redis: rdb, Prefix: prefix, Funduq: signer, Tickets: n.tickets, Log: log,
		NotLeading: http.HandlerFunc(n.notLeading), GapTimeout: o.KyokGap, Block: o.KyokBlock,
		MaxConcurrent: cfg.KyokMaxConcurrent, MaxFrame: cfg.MaxFrame, RegisterDeadline: cfg.RegisterDeadline, Clock: o.Clock,
		MaxModels: cfg.MaxAgentsPerRegister, MaxMetadataBytes: cfg.MaxAgentCardBytes, Pending: pending}
	n.elector = &lease.Elector{Lease: lease.New(rdb, LeaseKey(prefix), cfg.NodeID, cfg.LeaseTTL),
		Channel: LeaseChannel(prefix), Log: log, Lead: n.leadUnder, CanLead: n.reachesStore}
	n.mux = http.NewServeMux()
	// Refusals during a takeover (design.md §Deployment, "A takeover
	// under way"); /readyz says whether one is under way now.
	takeoverRefused := prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_tickets_refused_takeover_total",
		Help: "POST /tickets refused by a node that is not the leader while the lease's holder is not the leader row's (a takeover under way)."})
	reg.MustRegister(takeoverRefused)
	// Two processes under one FUNDUQ_NODE_ID (design.md §Deployment, "One
	// node id per node"): told on /metrics, /readyz and in the log.
	idConflicts := prometheus.NewCounter(prometheus.CounterOpts{Name: "funduq_node_id_conflicts_total",
		Help: "Times another live process was found announcing under this node's FUNDUQ_NODE_ID (once per finding, not per announcement)."})
	reg.MustRegister(idConflicts)
	n.idWatch = console.NewIDWatch(log, idConflicts.Inc)
	n.published = &publishedKey{st: st, mine: signer.PublicKeyHex(), log: log, refused: takeoverRefused,
		leading: func() bool { leading, _ := b.Leading(); return leading },
		holderNow: func(ctx context.Context) (string, error) {
			// Bounded by funduq's clock (design.md §A hung Redis), within
			// the ticket's own IssueTimeout.
			ctx, cancel := redisbound.Call(ctx)
			defer cancel()
			h, err := lease.ReadHolder(ctx, rdb, LeaseKey(prefix))
			if errors.Is(err, lease.ErrNoHolder) {
				return "", nil
			}
			return h.NodeID, err
		}}
	ticketOpts := tickets.HandlerOptions{PerMinute: cfg.TicketsPerMinute, PublishedKey: n.published.get, Leader: n.leaderFromRedis}
	if o.Clock != nil {
		n.tickets.Now, ticketOpts.Now = o.Clock.Now, o.Clock.Now
	}
	issue := tickets.LimitedHandler(n.tickets, signer.PublicKeyHex(), log, ticketOpts)
	n.mux.Handle("POST /tickets", issue)
	n.mux.Handle("/tickets", issue)
	n.mux.Handle("GET /ws/provider", n.links)
	n.mux.Handle("GET /ws/kyok", n.kyok)
	n.mux.HandleFunc("/ws/provider", wsconn.MethodNotAllowed)
	n.mux.HandleFunc("/ws/kyok", wsconn.MethodNotAllowed)
	n.mux.HandleFunc("GET /livez", n.livez)
	n.mux.HandleFunc("GET /readyz", n.readyz)
	n.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	con := console.New(console.Options{Token: cfg.ConsoleToken, Store: st, Redis: rdb, Broker: b,
		LeaseKey: LeaseKey(prefix), NodesKey: NodesKey(prefix), EndedKey: ConsoleEndedKey(prefix), LeaseTTL: cfg.LeaseTTL,
		NodeID: cfg.NodeID, AdvertiseURL: cfg.AdvertiseURL, Tolerance: cfg.ProviderQualityTolerance, Log: log, Clock: o.Clock})
	for _, p := range console.Patterns() {
		n.mux.Handle(p, con)
	}
	return n, nil
}

// Handler is the node's HTTP surface.
func (n *Node) Handler() http.Handler { return n.mux }

// FunduqKey is this node's public identity key.
func (n *Node) FunduqKey() string { return n.signer.PublicKeyHex() }

// Close releases the node's connections (after Run has returned).
func (n *Node) Close() {
	n.rdb.Close()
	n.st.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readyProbeTimeout bounds each store's part of a /readyz answer.
const readyProbeTimeout = 2 * time.Second

// readyz is 200 only on the leader with both stores answering. A standby
// reads the leader of record and says whether the identity key it
// published is this node's ("identity_key": "ok" or "mismatch", design.md
// §Deployment, "One identity key"); the read refreshes what POST /tickets
// checks, so a node out of the load balancer learns of a takeover by
// another key at its next health check. It also reads the lease and says
// whether a takeover is under way ("takeover": "under_way" while the
// lease's holder is not the row's, "none", or "unknown" when a store could
// not be read; §Deployment, "A takeover under way"). On every node it
// says whether another live process announces under its node id
// ("node_id": "duplicate", else "unique"; §Deployment, "One node id per
// node"), which does not change the status.
//
// Each store is probed under a deadline of its own, both at once: under one
// shared deadline a hung store spent it all, and the other store's probe
// then failed on the expired context and was reported unreachable too.
func (n *Node) readyz(w http.ResponseWriter, r *http.Request) {
	leading, epoch := n.Broker.Leading()
	var wg sync.WaitGroup
	var dbErr, redisErr, leaderErr, holderErr error
	var leader store.Leader
	var holder lease.Holder
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(r.Context(), readyProbeTimeout)
		defer cancel()
		if dbErr = n.st.Ping(ctx); dbErr == nil && !leading {
			leader, leaderErr = n.st.CurrentLeader(ctx)
		}
	})
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(r.Context(), readyProbeTimeout)
		defer cancel()
		if redisErr = n.rdb.Ping(ctx).Err(); redisErr == nil && !leading {
			holder, holderErr = lease.ReadHolder(ctx, n.rdb, LeaseKey(n.prefix))
		}
	})
	wg.Wait()
	body := map[string]any{"node": n.cfg.NodeID, "epoch": epoch, "role": "standby", "database": "ok", "redis": "ok",
		"takeover": "unknown", "node_id": "unique"}
	if n.idWatch.Duplicate() {
		body["node_id"] = "duplicate"
	}
	if leading {
		body["role"] = "leader"
		body["leader"] = n.cfg.AdvertiseURL
		body["identity_key"] = "ok"
		body["takeover"] = "none"
	}
	if errors.Is(holderErr, lease.ErrNoHolder) {
		holderErr = nil // nobody holds the lease: between leaders
	}
	if !leading && dbErr == nil && leaderErr == nil {
		body["epoch"] = leader.Epoch
		if redisErr == nil && holderErr == nil && holder.NodeID != "" && holder.NodeID == leader.Holder {
			body["leader"] = leader.AdvertiseURL
		}
		holderRead := redisErr == nil && holderErr == nil
		keyOK, underWay := n.published.observe(r.Context(), leader, holder.NodeID, holderRead)
		body["identity_key"] = "ok"
		if !keyOK {
			body["identity_key"] = "mismatch"
		}
		switch {
		case underWay:
			body["takeover"] = "under_way"
		case holderRead:
			body["takeover"] = "none"
		}
	}
	if !leading && (dbErr != nil || leaderErr != nil) && redisErr == nil {
		// Without the leader row, name the leader as POST /tickets does
		// (design.md §Deployment, "A standby without PostgreSQL"): the
		// lease's holder, when its announcement says it leads.
		if url, _ := n.leaderFromRedis(r.Context()); url != "" {
			body["leader"] = url
		}
	}
	// A standby is never ready: the load balancer sends traffic to the
	// leader alone, and a node on another key than the published one is
	// a standby by construction (the leader publishes its own).
	ok := leading
	if dbErr != nil {
		body["database"], ok = "unreachable", false
	}
	if redisErr != nil {
		body["redis"], ok = "unreachable", false
	}
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
}

// Run serves HTTP on ln and leads until ctx ends or its server fails (that
// error is returned); then it stops leading, closes every link and shuts
// the listener down.
func (n *Node) Run(ctx context.Context, ln net.Listener) error {
	parent := ctx // its cause (a signal, say) is the stop's, logged last
	// A kept-alive connection waiting for its next request is given what a
	// new one is given to send its headers: with no IdleTimeout, net/http
	// waits for ever, and anyone could hold the node's sockets by leaving
	// connections idle. (An upgraded link is the link's own business.)
	srv := &http.Server{Handler: n.mux, ReadHeaderTimeout: headerTimeout, IdleTimeout: headerTimeout, MaxHeaderBytes: MaxHeaderBytes}
	// The lease loop, the announcer and the watchdog pinger stop with this
	// context: a server that fails stops them too, so Run returns its error
	// and the supervisor restarts the node rather than it holding its lease
	// (and pinging its watchdog) with nobody able to reach it.
	ctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	var prof *http.Server
	if n.cfg.PprofAddr != "" {
		pln, err := net.Listen("tcp", n.cfg.PprofAddr)
		if err != nil {
			return fmt.Errorf("FUNDUQ_PPROF_ADDR: %w", err)
		}
		pm := http.NewServeMux()
		pm.HandleFunc("/debug/pprof/", pprof.Index)
		pm.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		pm.HandleFunc("/debug/pprof/profile", pprof.Profile)
		pm.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		pm.HandleFunc("/debug/pprof/trace", pprof.Trace)
		prof = &http.Server{Handler: pm, ReadHeaderTimeout: headerTimeout, IdleTimeout: headerTimeout}
		wg.Add(1)
		go func() { defer wg.Done(); _ = prof.Serve(pln) }()
		n.log.Info("pprof serving", "addr", pln.Addr().String())
	}
	errc := make(chan error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		n.lead(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		console.Announce(ctx, n.rdb, NodesKey(n.prefix), n.cfg.NodeID, n.cfg.AdvertiseURL, n.cfg.LeaseTTL,
			func() bool { leading, _ := n.Broker.Leading(); return leading }, n.idWatch)
	}()
	n.log.Info("broker node serving", "addr", ln.Addr().String(), "advertise", n.cfg.AdvertiseURL, "funduq_key", n.signer.PublicKeyHex())
	n.notifyReady(ctx, &wg)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		n.log.Error("broker node: its server failed; stopping", "err", err)
	}
	stopAll()
	// First, so systemd knows a node slow to hand over is stopping, not hung.
	n.notifyStopping()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut) // hijacked WebSockets are closed by the broker's teardown
	if prof != nil {
		_ = prof.Close()
	}
	wg.Wait()
	n.links.Wait()
	n.kyok.Wait()
	if err == nil {
		// The last line of a clean stop, a standby's too (a leader also
		// logged "leadership ended"): an operator tells it from a node
		// killed or hung.
		n.log.Info("broker node stopped", "cause", fmt.Sprint(context.Cause(parent)))
	}
	return err
}

// lead campaigns for the lease and leads while it holds it.
func (n *Node) lead(ctx context.Context) {
	_ = n.elector.Run(ctx)
}

// leadUnder is the leader's work, under the lease's context: take a new
// epoch (the fencing token, D10) and run the broker until leadership ends.
func (n *Node) leadUnder(ctx context.Context) {
	// Taking the epoch is the leader's first write, bound like every other
	// (D13: one that cannot land within store_retry_for makes the leader
	// step down): a node holding the lease without reaching PostgreSQL
	// would otherwise keep renewing it, and a standby that can reach it
	// would never lead (D10).
	//
	// The same write publishes this node's public identity key for the
	// doors (design.md §Deployment, "One identity key"): the leader is
	// the one providers meet, so its key is the one they pin, and a door
	// holding another refuses to sign bound runs.
	var took store.TookOver
	tctx, cancel := context.WithTimeout(ctx, storeRetryFor(n.cfg.StoreRetryFor))
	err := retry(tctx, func() (err error) {
		took, err = n.st.TakeOver(tctx, store.Takeover{Holder: n.cfg.NodeID, AdvertiseURL: n.cfg.AdvertiseURL,
			FunduqKey: n.signer.PublicKeyHex()})
		return err
	})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			n.storeLost.Store(true)
			n.log.Error("could not take an epoch in time; giving the lease up", "err", err,
				"store_retry_for", storeRetryFor(n.cfg.StoreRetryFor).String())
		}
		return
	}
	epoch := took.Epoch
	if took.PreviousKey != "" && took.PreviousKey != n.signer.PublicKeyHex() {
		// FUNDUQ_IDENTITY_KEY must be the same on every node and door: a
		// provider that pinned the previous key refuses this node, and a
		// door holding the previous key now refuses bound runs. Only
		// public keys are logged.
		n.log.Error("FUNDUQ_IDENTITY_KEY differs from the previous leader's: this node published its own public key; "+
			"set the same key on every broker node and door", "epoch", epoch,
			"funduq_key", n.signer.PublicKeyHex(), "previous_funduq_key", took.PreviousKey)
	}
	// Everything the leader runs stops under lctx: the lease's context,
	// and the heartbeat's verdict that PostgreSQL is out of reach (D13).
	lctx, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	defer n.heartbeat(lctx, epoch, lose)()
	defer n.kyok.Start(lctx, epoch)()
	if n.retention != nil {
		defer n.retention.Start(lctx)()
	}
	if err := n.Broker.Run(lctx, epoch, n.startIntake); err != nil {
		if errors.Is(err, broker.ErrStoreUnavailable) {
			n.storeLost.Store(true)
		}
		// A requested handover (`lease handover`, before a deploy) is
		// routine: Broker.Run logged its end at INFO with the cause.
		if !errors.Is(err, lease.ErrHandover) {
			n.log.Error("broker stopped leading", "err", err, "epoch", epoch)
		}
	}
}

// heartbeat keeps the leader's liveness visible in PostgreSQL while it
// leads (broker_heartbeat): a door's GET /agents says online only for
// agents served under an epoch whose heartbeat is alive, so while no node
// leads (the leader killed, frozen or partitioned) nothing reads online
// for longer than a lease TTL (D8, D10). Beats at a third of the TTL, on
// real time like the lease. The returned stop says the leader stopped.
//
// The heartbeat is also the leader's write when it has no other to make:
// a beat that fails is retried (retry's backoff) like any of its writes,
// and when none has landed for FUNDUQ_STORE_RETRY_FOR since the first
// that failed, the leader steps down (D13): lose ends its leadership with
// broker.ErrStoreUnavailable, the lease is released, and a standby that
// reaches PostgreSQL takes over and offers what the doors stored
// meanwhile. Without this a leader cut off from PostgreSQL alone, with
// Redis answering and nothing to write, kept the lease for ever (§The
// lease, "A leader without PostgreSQL"). A blip shorter than that is
// retried through and changes nothing.
func (n *Node) heartbeat(ctx context.Context, epoch int64, lose context.CancelCauseFunc) (stop func()) {
	ttl := n.cfg.LeaseTTL
	retryFor := storeRetryFor(n.cfg.StoreRetryFor)
	beat := func(ctx context.Context, d time.Duration) error {
		bctx, cancel := context.WithTimeout(ctx, max(ttl/3, time.Second))
		defer cancel()
		return n.st.Heartbeat(bctx, epoch, d)
	}
	// outlast retries the beat that failed at since until one lands (true)
	// or retryFor has passed since then: the leader steps down (false).
	outlast := func(ctx context.Context, since time.Time, err error) bool {
		n.heartbeatFailing.Set(1)
		n.log.Warn("leader heartbeat not written; retrying", "epoch", epoch, "err", err,
			"store_retry_for", retryFor.String())
		rctx, cancel := context.WithDeadline(ctx, since.Add(retryFor))
		defer cancel()
		last := err
		if err := retry(rctx, func() error {
			err := beat(rctx, ttl)
			if err != nil && rctx.Err() == nil {
				last = err // not the deadline's own error: the cause
			}
			return err
		}); err == nil {
			n.heartbeatFailing.Set(0)
			n.log.Info("leader heartbeat written again", "epoch", epoch, "failing_for", time.Since(since).String())
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		err = fmt.Errorf("%w: leader heartbeat not written for FUNDUQ_STORE_RETRY_FOR (%v): %w",
			broker.ErrStoreUnavailable, retryFor, last)
		n.log.Error("PostgreSQL unreachable for FUNDUQ_STORE_RETRY_FOR: the leader steps down and releases the lease",
			"epoch", epoch, "store_retry_for", retryFor.String(), "err", last)
		lose(err)
		return false
	}
	first := time.Now()
	firstErr := beat(ctx, ttl)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if firstErr != nil && ctx.Err() == nil && !outlast(ctx, first, firstErr) {
			return
		}
		t := time.NewTicker(max(ttl/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sent := time.Now()
				if err := beat(ctx, ttl); err != nil && ctx.Err() == nil && !outlast(ctx, sent, err) {
					return
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		n.heartbeatFailing.Set(0)
		// Best effort: a leader that cannot say so is read as gone when
		// its last beat runs out.
		_ = beat(context.Background(), 0)
	}
}

// reachesStore is the elector's CanLead: a node that stepped down for
// want of PostgreSQL (its epoch not taken, a write or its heartbeat not
// landing within store_retry_for; D10, D13) campaigns again only once a
// ping answers, so it leaves the lease to a node that reaches the
// database, and with PostgreSQL gone for every node it does not take the
// lease only to give it up again. Other nodes are not asked: a standby
// that never led campaigns as before.
func (n *Node) reachesStore(ctx context.Context) error {
	if !n.storeLost.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyProbeTimeout)
	defer cancel()
	if err := n.st.Ping(ctx); err != nil {
		return fmt.Errorf("PostgreSQL still unreachable since this node stepped down: %w", err)
	}
	n.storeLost.Store(false)
	return nil
}

// storeRetryFor is FUNDUQ_STORE_RETRY_FOR with the broker's default.
func storeRetryFor(d time.Duration) time.Duration {
	if d <= 0 {
		return 30 * time.Second
	}
	return d
}

// retryBackoff paces retry: 50 ms doubling to 1.6 s, without jitter (one
// node retries alone, nothing to spread out).
var retryBackoff = backoff.Policy{Min: 50 * time.Millisecond, Max: 1600 * time.Millisecond}

// retry runs fn until it succeeds or ctx ends, backing off up to 1.6 s.
func retry(ctx context.Context, fn func() error) error {
	for n := 1; ; n++ {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryBackoff.Delay(n)):
		}
	}
}

// notLeading answers a provider's upgrade on a standby (D11): 503 with
// Retry-After and the leader's advertised URL; no ticket is spent. The
// leader row names it; with the row out of reach (PostgreSQL), Redis does
// (leaderFromRedis), each read bounded apart so a hung database leaves
// Redis its time.
func (n *Node) notLeading(w http.ResponseWriter, r *http.Request) {
	body := apierr.New(apierr.CodeNotLeader, "this funduq broker node is a standby; connect to the leader")
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	l, err := n.st.CurrentLeader(ctx)
	if err == nil {
		if h, err := lease.ReadHolder(ctx, n.rdb, LeaseKey(n.prefix)); err == nil && h.NodeID == l.Holder {
			body.Leader = l.AdvertiseURL
		}
	}
	cancel()
	if err != nil {
		body.Leader, _ = n.leaderFromRedis(r.Context())
	}
	w.Header().Set("Retry-After", "1")
	apierr.Write(w, http.StatusServiceUnavailable, body)
}

func (n *Node) startIntake(ctx context.Context) error {
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(n.cfg.DatabaseURL)
		if err != nil {
			return nil, err
		}
		cfg.RuntimeParams["application_name"] = "funduq-broker-intake"
		return pgx.ConnectConfig(ctx, cfg)
	}
	l := intake.New(connect, n.Broker, intake.Options{Logger: n.log, PollInterval: n.IntakePoll})
	return l.Run(ctx)
}

// Store is the node's store (for tests and operator tools).
func (n *Node) Store() *store.Store { return n.st }

// headerTimeout bounds how long a connection may take to send a request's
// headers, and how long a kept-alive one may wait before its next request.
const headerTimeout = 10 * time.Second

// MaxHeaderBytes bounds a request's header block, request line and query
// included (larger is 431); providers send a few short headers.
const MaxHeaderBytes = 64 << 10
