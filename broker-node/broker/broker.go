package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jonboulle/clockwork"

	"github.com/funduq/funduq-go/core/backoff"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/strictjson"
	"github.com/funduq/funduq-go/core/wire"
)

// Settings are the broker's waits (D14).
type Settings struct {
	DeliverTimeout time.Duration // an offer's wait for its answer (5s)
	// OfferingAfter is how long an offer is out unanswered before the
	// record says offering (50ms in config); 0: written as the frame
	// leaves. An answer sooner claims the run from queued, one write.
	OfferingAfter     time.Duration
	UnservedTimeout   time.Duration // a queued run's wait for anyone to serve its agent (45s)
	UndeliveredWindow time.Duration // a claimed run's window before undelivered is counted (1800s)
	ProviderGrace     time.Duration // re-attach window after a takeover (30s)
	// LeaseTTL is the leader lease's TTL: at a takeover, how long before it
	// the previous leader may have gone away (a link grace running then
	// still counts its provider as expected back).
	LeaseTTL time.Duration
	// LinkGrace is how long a link lost without the provider's close frame
	// holds its runs for the same key to re-attach (register their agent)
	// or report, and, once it re-attached, how long from then a run waits
	// for the key's report (D5, 5s in config); 0: they fail
	// provider_left_holding_it at once.
	LinkGrace        time.Duration
	QualityTolerance int // counter level that withdraws a provider; 0 disables (3)
	// StoreRetryFor bounds how long one write is retried while PostgreSQL
	// fails it (30s); then the leader steps down (ErrStoreUnavailable).
	StoreRetryFor time.Duration
	// SweepInterval is how often the sweep looks at its clocks and nudges
	// waiting heads when nothing wakes it sooner (1s). The reference slept
	// up to the unserved window; ticking faster only makes retries sooner.
	SweepInterval time.Duration
	// Limits bound what one provider may make a run hold (limits.go).
	Limits Limits
	// EventBacklog bounds the events read from one provider link and not
	// yet stored (1024). When a link has that many waiting, the broker
	// stops reading it until its lanes' writes catch up: a provider can
	// never outrun PostgreSQL by more than this, and nothing is dropped.
	EventBacklog int
	// EventBacklogBytes bounds the same events' bytes (4 MiB); one event
	// is always let in when none waits.
	EventBacklogBytes int
	// QueuePage bounds the queued runs one read takes at takeover and in
	// each catch-up (500): the queue is read in pages of it, oldest first,
	// so a long queue is never one query.
	QueuePage int
}

// The backlog's defaults: deep enough that a lane's batch amortizes its
// transaction (the batch is what the link has read meanwhile), small
// enough to bound a link's memory.
const (
	DefaultEventBacklog      = 1024
	DefaultEventBacklogBytes = 4 << 20
)

// maxEventBatch bounds the events a lane stores in one transaction.
const maxEventBatch = 1024

func (s *Settings) defaults() {
	s.Limits.defaults()
	if s.DeliverTimeout <= 0 {
		s.DeliverTimeout = 5 * time.Second
	}
	if s.UnservedTimeout <= 0 {
		s.UnservedTimeout = 45 * time.Second
	}
	if s.UndeliveredWindow <= 0 {
		s.UndeliveredWindow = 1800 * time.Second
	}
	if s.ProviderGrace < 0 {
		s.ProviderGrace = 0
	}
	if s.LinkGrace < 0 {
		s.LinkGrace = 0
	}
	if s.StoreRetryFor <= 0 {
		s.StoreRetryFor = 30 * time.Second
	}
	if s.SweepInterval <= 0 {
		s.SweepInterval = time.Second
	}
	if s.EventBacklog <= 0 {
		s.EventBacklog = DefaultEventBacklog
	}
	if s.EventBacklogBytes <= 0 {
		s.EventBacklogBytes = DefaultEventBacklogBytes
	}
	if s.QueuePage <= 0 {
		s.QueuePage = 500
	}
}

// Broker owns the roster, the lanes and the sweep while it leads.
type Broker struct {
	st      *store.Store
	feed    *livefeed.Feed // nil: no live fan-out (events are still stored)
	clock   clockwork.Clock
	log     *slog.Logger
	set     Settings
	metrics *Metrics

	// rosterMu orders roster changes with their writes to the agents
	// table, so the table ends as the in-memory roster does when two links
	// of one key register and detach at once. Taken before mu, never under it.
	rosterMu sync.Mutex
	// agentDeletes counts deleteAgent writes, each counted under rosterMu
	// once its DELETE is done: a register whose agents' rows were written
	// before one (outside rosterMu) writes them again under it before
	// its roster change (design.md §Two processes of one key). Under mu.
	agentDeletes uint64
	mu           sync.Mutex
	leading      bool
	ready        bool // recovery done: providers and readiness probes may come
	epoch        int64
	// writeEpoch is epoch for write's lines, which may be called under
	// mu (docs/design.md §Logs: a broker line names its epoch).
	writeEpoch atomic.Int64
	ctx        context.Context // the leadership context
	stop       context.CancelCauseFunc
	takeoverAt time.Time
	runIndex   // the lanes, by run, by thread and by the run they address (index.go)
	links      map[Link]*linkState
	// keyLinks lists each key's open links (those of links), for the
	// bound on a key's links and the replaced links a closing link leaves
	// (replaced.go).
	keyLinks map[string]map[*linkState]struct{}
	served   map[AgentRef]*linkState
	buckets  map[string]*bucket
	unserved map[AgentRef]time.Time // unserved-since, for the unserved clock
	expected map[AgentRef]bool      // served when the previous leader went away
	// inherited: the agents of expected recover read back, until this
	// leader serves them or provider_grace ends; they keep their places
	// (placesLocked). expected also takes what this leader serves within
	// the grace, which must not: those give their places up as any
	// served agent's.
	inherited map[AgentRef]bool
	// requeued: runs recover put back to queued from an older epoch's
	// offer, until their lanes open (take keeps their places, keepPlace).
	requeued map[string]bool
	// lostUntil: agents whose link was lost without a close frame, until
	// the link grace ends — their key is expected back (D5).
	lostUntil map[AgentRef]time.Time
	// displaced: agents a register took from another link of their key
	// that went on serving its other agents (taken.go), until no link
	// serves them; their going free is then announced to the key's links.
	displaced map[AgentRef]bool
	// reserved: places registers took (Limits.MaxServedAgents) between
	// their check and their roster change (Register).
	reserved int
	// releasing: names a register counted as freed (it drops them, and
	// they are its link's), between its check and its roster change.
	// Another register taking one of them meanwhile adds a place: it would
	// otherwise be counted held by both. Not reset with the roster: the
	// registers in flight release what they marked.
	releasing map[AgentRef]int
	graceOver bool       // the sweep has ended provider_grace's waits
	ended     *endedRuns // runs seen terminal lately (ended.go)
	wake      chan struct{}
	lastNudge time.Time
	// sweptAt is the clock's time (UnixNano) the last finished sweep pass
	// read: a test that moves a fake clock waits for a pass that saw it.
	sweptAt atomic.Int64
	lanesWG sync.WaitGroup
	// queries is the broker-wide budget of pooled connections provider
	// queries and registers' writes may hold at once (queries.go); not
	// reset with the roster: those in flight give back what they took.
	queries *budget
}

// Options are New's dependencies; Store is required.
type Options struct {
	Store    *store.Store
	Feed     *livefeed.Feed
	Clock    clockwork.Clock
	Logger   *slog.Logger
	Settings Settings
	Metrics  *Metrics
}

// New builds a broker that does nothing until Run.
func New(o Options) *Broker {
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	o.Settings.defaults()
	b := &Broker{st: o.Store, feed: o.Feed, clock: o.Clock, log: o.Logger, set: o.Settings, metrics: o.Metrics}
	pool := 0
	if o.Store != nil {
		pool = int(o.Store.Pool().Config().MaxConns)
	}
	b.queries = newBudget(QueryBudget(pool))
	b.reset()
	o.Metrics.bind(b)
	return b
}

func (b *Broker) reset() {
	b.runIndex = newRunIndex()
	b.links = map[Link]*linkState{}
	b.keyLinks = map[string]map[*linkState]struct{}{}
	b.served = map[AgentRef]*linkState{}
	b.buckets = map[string]*bucket{}
	b.unserved = map[AgentRef]time.Time{}
	b.expected = map[AgentRef]bool{}
	b.inherited = map[AgentRef]bool{}
	b.lostUntil = map[AgentRef]time.Time{}
	b.displaced = map[AgentRef]bool{}
	b.graceOver = false
	b.ended = newEndedRuns()
	b.wake = make(chan struct{}, 1)
}

// inGraceLocked reports whether provider_grace after the takeover is still
// running. Caller holds b.mu.
func (b *Broker) inGraceLocked() bool {
	return !b.graceOver && b.clock.Now().Before(b.takeoverAt.Add(b.set.ProviderGrace))
}

// ErrNotLeading is returned to links and doors while this broker does not lead.
var ErrNotLeading = errors.New("this broker node is not the leader")

// Leading reports whether this broker leads and has read back what earlier
// leaders left, and the epoch it leads under.
func (b *Broker) Leading() (bool, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leading && b.ready, b.epoch
}

// Run leads under epoch until ctx ends (leadership lost or handed over) or a
// write finds the epoch stale. It reads back the runs an earlier leader left
// (D7), runs the sweep, and calls startIntake (if non-nil) once recovery is
// done, under the same context. When it returns, every lane has stopped and
// every link has been closed.
func (b *Broker) Run(ctx context.Context, epoch int64, startIntake func(ctx context.Context) error) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	b.mu.Lock()
	if b.leading {
		b.mu.Unlock()
		return errors.New("broker: already leading")
	}
	b.reset()
	b.leading, b.epoch, b.ctx, b.stop, b.takeoverAt = true, epoch, ctx, stop, b.clock.Now()
	b.writeEpoch.Store(epoch)
	b.lastNudge = b.takeoverAt
	b.mu.Unlock()
	log := b.log.With("epoch", epoch)
	log.InfoContext(ctx, "broker leading")
	b.metrics.leading(epoch, true)

	var wg sync.WaitGroup
	err := b.recover(ctx)
	if err == nil {
		b.mu.Lock()
		b.ready = true
		if !b.inGraceLocked() {
			// The read-back has decided every run it took; with no grace
			// left, expected is read no more (take.go).
			clear(b.expected)
			clear(b.inherited)
		}
		b.mu.Unlock()
		wg.Add(1)
		go func() { defer wg.Done(); b.sweep(ctx) }()
		if startIntake != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := startIntake(ctx); err != nil && ctx.Err() == nil {
					stop(fmt.Errorf("intake: %w", err))
				}
			}()
		}
		<-ctx.Done()
	} else {
		stop(err)
	}
	cause := context.Cause(ctx)
	wg.Wait()
	b.teardown(cause)
	b.metrics.leading(epoch, false)
	log.InfoContext(context.Background(), "broker stopped leading", "cause", fmt.Sprint(cause))
	if errors.Is(cause, context.Canceled) || cause == nil {
		return nil
	}
	return cause
}

// teardown stops every lane and closes every link. Nothing is written: what
// the runs hold is read back by the next leader.
func (b *Broker) teardown(cause error) {
	b.lanesWG.Wait()
	b.mu.Lock()
	links := make([]*linkState, 0, len(b.links))
	for _, ls := range b.links {
		links = append(links, ls)
	}
	for _, l := range b.lanes {
		l.stopTimers()
	}
	for _, ls := range links {
		ls.detached()
		dropMovedLocked(ls)
	}
	b.leading, b.ready = false, false
	b.reset()
	b.mu.Unlock()
	reason := "funduq broker node stopped leading; reconnect"
	switch {
	case cause == nil:
	case errors.Is(cause, store.ErrStaleEpoch):
		reason = "funduq broker node was deposed; reconnect"
	case errors.Is(cause, ErrStoreUnavailable):
		reason = "funduq broker node stepped down: its database did not accept writes; reconnect"
	}
	for _, ls := range links {
		ls.link.Close(reason)
	}
}

// lost ends leadership because a write found the epoch stale.
func (b *Broker) lost(err error) {
	b.mu.Lock()
	stop := b.stop
	b.mu.Unlock()
	if stop != nil {
		stop(err)
	}
}

// The leader's store retries (design.md D13, "Failure, component by
// component"): exponential backoff from writeRetryBase, doubling up to
// writeRetryCeiling, each wait with up to 50% jitter so the lanes retrying
// at once do not hit PostgreSQL again in step; StoreRetryFor bounds the
// whole.
const (
	writeRetryBase    = 50 * time.Millisecond
	writeRetryCeiling = 2 * time.Second
)

// ErrStoreUnavailable ends leadership when a write could not land within
// StoreRetryFor: the leader steps down, closing its links with a reason,
// and whoever leads next (this node again, once PostgreSQL answers) reads
// every run back (D7). Nothing is written meanwhile, so nothing is lost
// that the record and the providers' resends do not give back.
var ErrStoreUnavailable = errors.New("the database did not accept the leader's writes in time")

// writeRetry is the backoff of the leader's store retries: the jitter is
// added on top, so a wait at the ceiling may reach 3 s.
var writeRetry = backoff.Policy{Min: writeRetryBase, Max: writeRetryCeiling, Jitter: 0.5, Spread: backoff.Over}

// retryDelay is the wait after failed attempt n (1, 2, …).
func retryDelay(n int) time.Duration { return writeRetry.Delay(n) }

// write runs one store write, retrying transient failures (PostgreSQL away)
// with bounded backoff until it lands, the leadership ends, or it is
// refused. A stale epoch ends leadership; so does a write that has not
// landed within StoreRetryFor (ErrStoreUnavailable). Refusals (illegal
// transition, not found) are returned for the caller to judge. fn is
// called again on a retry, so it must be safe to repeat: a write that may
// have committed before its answer was lost carries a key that makes the
// repeat a no-op (store.AppendProviderEventsOnce).
func (b *Broker) write(ctx context.Context, what string, fn func() error) error {
	began := time.Now() // real time: this waits on PostgreSQL, not on a protocol deadline
	for attempt := 1; ; attempt++ {
		err := fn()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, store.ErrStaleEpoch):
			b.log.ErrorContext(ctx, "write refused: epoch is stale; stepping down", "op", what, "epoch", b.writeEpoch.Load(), "err", err)
			b.lost(err)
			return err
		case errors.Is(err, store.ErrIllegalTransition), errors.Is(err, store.ErrNotFound),
			errors.Is(err, store.ErrDuplicateEvent), errors.Is(err, store.ErrAgentInUse),
			errors.Is(err, store.ErrFingerprintTaken), errors.Is(err, store.ErrSeqTaken):
			return err
		case refusedData(err):
			// The data, not the database: retrying cannot land it, and
			// stepping down would cost every run its leader for one
			// report the admission checks should have refused.
			b.log.ErrorContext(ctx, "store write refused its data", "op", what, "epoch", b.writeEpoch.Load(), "err", err)
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		delay := retryDelay(attempt)
		if time.Since(began)+delay > b.set.StoreRetryFor {
			err = fmt.Errorf("%w: %s failed %d times in %v: %w", ErrStoreUnavailable, what, attempt,
				time.Since(began).Round(time.Millisecond), err)
			b.metrics.writeFailures.Inc()
			b.log.ErrorContext(ctx, "store write did not land in time; stepping down", "op", what, "epoch", b.writeEpoch.Load(), "attempts", attempt,
				"store_retry_for", b.set.StoreRetryFor.String(), "err", err)
			b.lost(err)
			return err
		}
		b.metrics.writeRetries.Inc()
		b.log.WarnContext(ctx, "store write failed; retrying", "op", what, "epoch", b.writeEpoch.Load(), "attempt", attempt, "in", delay.String(), "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// refusedData reports a PostgreSQL refusal of the values written — a data
// exception (SQLSTATE class 22: text it cannot hold, a number out of range)
// or an integrity violation (class 23) — which no retry can change.
func refusedData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && len(pgErr.Code) == 5 && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23")
}

// ---- links and the roster ----

// Attach records an open link (after its handshake). declared is the hello's
// maxConcurrentRuns (nil = unlimited); re-declaring keeps the key's count.
func (b *Broker) Attach(l Link, declared *int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.leading || !b.ready {
		return ErrNotLeading
	}
	ls := &linkState{id: linkSeq.Add(1), link: l, key: l.Key(), declared: declared, names: map[string]bool{}, opened: b.clock.Now(),
		backlog: newBacklog(b.set.EventBacklog, b.set.EventBacklogBytes), gone: make(chan struct{})}
	b.links[l] = ls
	b.addKeyLinkLocked(ls)
	bk := b.bucketFor(ls.key)
	bk.declared = declared
	b.metrics.links.Inc()
	b.log.Info("provider link open", "provider_key", ls.key, "link", ls.id, "max_concurrent_runs", fmtLimit(declared), "epoch", b.epoch)
	return nil
}

func fmtLimit(d *int) string {
	if d == nil {
		return "unlimited"
	}
	return fmt.Sprint(*d)
}

func (b *Broker) bucketFor(key string) *bucket {
	bk := b.buckets[key]
	if bk == nil {
		bk = &bucket{}
		b.buckets[key] = bk
	}
	return bk
}

// closeWithdrawn closes a withdrawn link that holds no run, with close code
// 1008 and ErrWithdrawn's words (design.md D6). It does not block: it may
// be called under b.mu.
func closeWithdrawn(l Link) {
	if c, ok := l.(interface{ CloseWith(code int, reason string) }); ok {
		c.CloseWith(closePolicyViolation, ErrWithdrawn.Error())
		return
	}
	l.Close(ErrWithdrawn.Error())
}

// closePolicyViolation is WebSocket close code 1008 (RFC 6455 §7.4.1).
const closePolicyViolation = 1008

// ErrWithdrawn refuses a register on a link withdrawn at tolerance.
var ErrWithdrawn = errors.New("this provider was withdrawn from service for abnormal behaviour; reconnect (new ticket, handshake and register) to be served again")

// RegisterError is a register refused for a reason the provider can fix.
type RegisterError struct{ Msg string }

func (e *RegisterError) Error() string { return e.Msg }

// RetryLaterError is a register refused for the moment: the served-agents
// cap, which frees as other providers leave, so the same register may be
// answered "registered" later (its error's code is wire.CodeRetryLater,
// design.md §The provider wire, "Refusal codes").
type RetryLaterError struct{ Msg string }

func (e *RetryLaterError) Error() string { return e.Msg }

// Register replaces the roster link serves with agents. announce is called
// with the sorted names once they are recorded, in the same step as the
// roster change (under the roster's locks, so it must only queue a frame):
// the link writes "registered" ahead of any run for them, and a provider
// that has read "registered" knows the change is in effect. Two links of
// one key are therefore replaced in the order they were answered, never in
// the order their goroutines happened to reach the roster.
func (b *Broker) Register(ctx context.Context, l Link, agents []wire.Registration, providerName string, announce func(names []string)) error {
	if len(agents) == 0 {
		return &RegisterError{"register needs at least one agent"}
	}
	if strings.ContainsRune(providerName, 0) {
		return &RegisterError{"providerName holds a NUL character (\\u0000), which funduq cannot store"}
	}
	if err := b.set.Limits.Register.checkRegister(agents, providerName); err != nil {
		return err
	}
	seen := map[string]bool{}
	rows := make([]store.Agent, 0, len(agents))
	for i, a := range agents {
		if !wire.AgentNamePattern.MatchString(a.Name) {
			return &RegisterError{fmt.Sprintf("agents[%d].name %q must match %s", i, a.Name, wire.AgentNamePattern)}
		}
		if seen[a.Name] {
			return &RegisterError{fmt.Sprintf("agents[%d].name %q is listed twice", i, a.Name)}
		}
		if strings.ContainsRune(a.Description, 0) {
			return &RegisterError{fmt.Sprintf("agents[%d] (%s) holds a NUL character (\\u0000), which funduq cannot store", i, a.Name)}
		}
		for _, doc := range []struct {
			field string
			raw   json.RawMessage
		}{{"agentCardExtra", a.AgentCardExtra}, {"metadata", a.Metadata}} {
			// An object or nothing, as in the reference's Registration:
			// the A2A card reads only an object's members, so anything
			// else would be taken and then dropped unseen (D15).
			if !objectOrAbsent(doc.raw) {
				return &RegisterError{fmt.Sprintf("agents[%d] (%s) %s must be a JSON object", i, a.Name, doc.field)}
			}
			if why := strictjson.Unstorable(doc.raw); why != "" {
				return &RegisterError{fmt.Sprintf("agents[%d] (%s) %s, which funduq cannot store", i, a.Name, why)}
			}
		}
		seen[a.Name] = true
		rows = append(rows, store.Agent{ProviderKey: l.Key(), Name: a.Name, Description: a.Description,
			AgentCardExtra: a.AgentCardExtra, Metadata: a.Metadata, TakesInterjections: a.TakesInterjections})
	}
	b.mu.Lock()
	ls, ok := b.links[l]
	epoch, lctx := b.epoch, b.ctx
	leading := b.leading
	deletes := b.agentDeletes // before the writes below: see the rewrite under rosterMu
	if ok && ls.withdrawn {
		b.mu.Unlock()
		return ErrWithdrawn
	}
	if !leading || !ok {
		b.mu.Unlock()
		return ErrNotLeading
	}
	// The cap on what many keys make the leader serve (design.md §The
	// provider wire, "Admission"): checked before anything is recorded,
	// and the places taken until the roster change below, so two registers
	// at once cannot both take the last ones.
	grow, freed := b.growthLocked(ls, seen)
	if held := b.placesLocked(); grow > 0 && held+b.reserved+grow > b.set.Limits.MaxServedAgents {
		b.mu.Unlock()
		b.log.Info("register refused at the served agents cap", "provider_key", ls.key, "link", ls.id,
			"adding", grow, "held", held, "cap", b.set.Limits.MaxServedAgents)
		// The message names the cap, as the per-register limits do, but
		// not how many are served: that is every key's business.
		return &RetryLaterError{fmt.Sprintf("this register would add %d agents to those funduq serves, over the limit of %d at once (FUNDUQ_MAX_SERVED_AGENTS); retry later",
			grow, b.set.Limits.MaxServedAgents)}
	}
	reserved := max(grow, 0)
	b.reserved += reserved
	b.markReleasingLocked(freed, 1)
	b.mu.Unlock()
	defer func() { // not released by the roster change: an early return
		if reserved > 0 || freed != nil {
			b.mu.Lock()
			b.reserved -= reserved
			b.markReleasingLocked(freed, -1)
			b.mu.Unlock()
		}
	}()
	pub, err := identity.ParsePublicKey(l.Key())
	if err != nil {
		return err
	}
	prov := store.Provider{PublicKey: l.Key(), Fingerprint: identity.Fingerprint(pub), DisplayName: providerName}
	if err := b.registerWrites(ctx, lctx, epoch, prov, rows); err != nil {
		return err
	}
	names := sortedNames(seen)

	b.rosterMu.Lock()
	defer b.rosterMu.Unlock()
	// A deleteAgent of another link of the key, written after the rows
	// above and before this roster change, may have deleted one of them:
	// the rows are written again, in the roster's order, so that a name
	// this link serves keeps its record (design.md §Two processes of one
	// key).
	b.mu.Lock()
	raced := b.agentDeletes != deletes
	b.mu.Unlock()
	if raced {
		if err := b.registerRows(ctx, lctx, epoch, prov, rows); err != nil {
			return err
		}
	}
	b.mu.Lock()
	b.reserved -= reserved // served from here on, or given up
	reserved = 0
	b.markReleasingLocked(freed, -1) // dropped below, or taken by another link of the key
	freed = nil
	if b.links[l] != ls || ls.withdrawn { // detached or withdrawn meanwhile
		// RegisterAgents marked the names served: take back those no
		// other link of the key serves.
		var orphaned []string
		for _, n := range names {
			if b.served[AgentRef{ls.key, n}] == nil {
				orphaned = append(orphaned, n)
			}
		}
		withdrawn := b.links[l] == ls
		leading := b.leading
		b.mu.Unlock()
		if leading && len(orphaned) > 0 {
			_ = b.write(lctx, "mark unheld agents unserved", func() error { return b.st.MarkUnserved(lctx, epoch, ls.key, orphaned) })
		}
		if withdrawn {
			return ErrWithdrawn
		}
		return ErrNotLeading
	}
	var dropped []string
	for n := range ls.names {
		if !seen[n] {
			ref := AgentRef{ls.key, n}
			if b.served[ref] == ls {
				delete(b.served, ref)
				b.unserved[ref] = b.clock.Now()
				dropped = append(dropped, n)
			}
		}
	}
	ls.names = seen
	// A replaced link that registers again serves again, by the rule
	// that replaced it: the last register of a name wins (design.md §Two
	// processes of one key).
	ls.replaced = false
	ls.registeredOnce = ls.registeredOnce || len(seen) > 0
	ls.bare = nil // registered: no longer pending (WhenBare)
	ls.interjections = map[string]bool{}
	for _, a := range agents {
		if a.TakesInterjections {
			ls.interjections[a.Name] = true
		}
	}
	replaced := map[*linkState][]string{}
	for n := range seen {
		ref := AgentRef{ls.key, n}
		if old := b.served[ref]; old != nil && old != ls {
			replaced[old] = append(replaced[old], n)
		}
		b.served[ref] = ls
		delete(b.unserved, ref)
		delete(b.lostUntil, ref)
		delete(b.inherited, ref) // its place is a served agent's now
		// Served under this leadership: within provider_grace its runs
		// wait for it to come back like those of a provider expected back
		// from the previous leader. Past the grace nothing reads it (take
		// asks only in grace or on read-back), so it is not kept: the map
		// would grow by every agent ever registered.
		if b.inGraceLocked() {
			b.expected[ref] = true
		}
	}
	// A link of the key left serving nothing by this register is told so
	// and left open, offered nothing more (replaced.go): closed, the
	// reference SDK reconnected and registered its roster, replacing this
	// link in turn, and two such processes took the agent from each other
	// once a second for as long as both ran.
	// One that goes on serving other agents is told, name by name, what
	// was taken (taken.go), so that its process leaves those names out of
	// its next register rather than take them back (design.md §Two
	// processes of one key); a name this register dropped that was taken
	// from another link is announced free.
	var idle []*linkState
	notices := b.freedLocked(ls.key, ls, dropped)
	for old, took := range replaced {
		serves := false
		for n := range old.names {
			if b.served[AgentRef{old.key, n}] == old {
				serves = true
				break
			}
		}
		if !serves {
			old.replaced = true
			idle = append(idle, old)
			// An offer out to it is offered again to this link at once
			// (lane.onReplaced), not left to its deliver_timeout.
			for ln := range b.byLink[old] {
				ln.q.push(replacedCmd{old})
			}
		} else {
			notices = append(notices, b.takenLocked(old, took)...)
		}
	}
	// The key re-attaching: a run one of its lost links left held for
	// these agents is carried on (design.md D5), told in its own lane
	// before "registered" is written.
	now := b.clock.Now()
	for held := range b.lostHeld[ls.key] {
		if seen[held.agent.Name] {
			b.unlostHeldLocked(held)
			held.q.push(reattachCmd{ls, now})
		}
	}
	b.wakeKeptLocked(ls) // what it sent before this register (keep.go)
	var over []*linkState
	if len(idle) > 0 {
		over = b.overKeyBoundLocked(ls.key)
	}
	b.bucketFor(ls.key).declared = ls.declared
	// Announced before the lock is let go: an offer for these names is
	// sent only by a lane that reads the roster after this, so it queues
	// behind "registered" on the link's serialized writer.
	announce(names)
	b.nudgeHeadsLocked()
	b.wakeSweep()
	b.mu.Unlock()
	// Served again now that this link owns the names: a replaced link of
	// the same key may have marked them unserved since RegisterAgents.
	_ = b.write(lctx, "mark agents served", func() error { return b.st.MarkServed(ctx, epoch, ls.key, names) })
	if len(dropped) > 0 {
		_ = b.write(lctx, "mark dropped agents unserved", func() error { return b.st.MarkUnserved(ctx, epoch, ls.key, dropped) })
	}
	sendNotices(notices)
	for _, old := range idle {
		frame, _ := wire.Marshal(wire.Error{Type: wire.TypeError, Message: ErrReplaced})
		_ = old.link.Send(frame)
		b.log.Info("provider link replaced; left open, offered nothing", "provider_key", old.key, "link", old.id, "by", ls.id, "epoch", epoch)
	}
	b.closeReplaced(over, ReasonTooManyLinks)
	b.log.Info("agents registered", "provider_key", ls.key, "link", ls.id, "names", names, "dropped", dropped, "epoch", epoch)
	return nil
}

// registerWrites records a register's provider and agents within the query
// budget (queries.go), served before the queries waiting for it: each
// link's register runs on its read loop, so without the budget a
// stranger's links registering while PostgreSQL is slow to answer held a
// pooled connection each, the whole pool, and the lanes' claims, events and
// ends waited behind them (design.md §The provider wire, "Admission"). The
// writes that follow in Register are made one at a time under rosterMu, and
// the budget is given back before it.
func (b *Broker) registerWrites(ctx, lctx context.Context, epoch int64, p store.Provider, rows []store.Agent) error {
	if _, err := b.takeBudget(ctx, lctx.Done(), true); err != nil {
		return err
	}
	defer b.queries.give()
	if err := b.registerRows(ctx, lctx, epoch, p, rows); err != nil {
		return err
	}
	// A key withdrawn on another link and registering on this one takes the
	// way back (design.md D6): in service again, its record intact. Cleared
	// before "registered" is sent, so nobody served reads as withdrawn.
	_ = b.write(lctx, "end a withdrawal", func() error { return b.st.ClearWithdrawn(ctx, epoch, p.PublicKey) })
	return nil
}

// registerRows writes a register's provider and agents rows.
func (b *Broker) registerRows(ctx, lctx context.Context, epoch int64, p store.Provider, rows []store.Agent) error {
	err := b.write(lctx, "register agents", func() error { return b.st.RegisterAgents(ctx, epoch, p, rows) })
	if errors.Is(err, store.ErrFingerprintTaken) {
		return &RegisterError{"this key's fingerprint is already held by another key; use another key"}
	}
	return err
}

// objectOrAbsent reports whether raw, a value of a frame that passed the
// strict JSON check, is an object, null or missing.
func objectOrAbsent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null" || raw[0] == '{'
}

// ErrReplaced is what a link is told when a newer link of its key took over
// every agent it served: it stays open, offered nothing (replaced.go).
const ErrReplaced = wire.ReplacedMessage

// DeleteAgent takes name offline (if this link serves it) and deletes its
// record, refusing an agent with any history.
func (b *Broker) DeleteAgent(ctx context.Context, l Link, name string) error {
	if !wire.AgentNamePattern.MatchString(name) {
		// No register takes such a name, so none is served or stored
		// under it; asking PostgreSQL about it (a NUL it cannot hold) was
		// refused as data, and the provider was told to try again.
		return &RegisterError{fmt.Sprintf("agent %q is not registered", name)}
	}
	b.rosterMu.Lock()
	defer b.rosterMu.Unlock()
	b.mu.Lock()
	ls, ok := b.links[l]
	epoch, lctx := b.epoch, b.ctx
	if !ok || !b.leading {
		b.mu.Unlock()
		return ErrNotLeading
	}
	ref := AgentRef{ls.key, name}
	if by := b.served[ref]; by != nil && by != ls {
		// Deleting happens on the serving link (broker.md §7.2): this
		// link does not serve the name, another of the key's does, and
		// goes on serving it. Writing it unserved, or deleting its record,
		// would leave that link serving an agent the listing says is
		// offline or gone.
		b.mu.Unlock()
		return &RegisterError{fmt.Sprintf("agent %q is served by another link of this key; send deleteAgent on that link", name)}
	}
	var notices []nameNotice
	var back []*linkState
	if b.served[ref] == ls {
		delete(b.served, ref)
		b.unserved[ref] = b.clock.Now()
		notices = b.freedLocked(ls.key, ls, []string{name})
		if !b.servesLocked(ls) {
			// Left serving nothing (our SDK's shutdown deletes its
			// agents one by one, then drains): the replaced links of
			// the key are closed to come back for what they declared
			// (replaced.go). One still serving others keeps them idle:
			// registering their whole roster, they would take those.
			back = b.unservedReplacedLocked(ls.key, nil)
		}
	}
	delete(ls.names, name)
	b.mu.Unlock()
	defer b.closeReplaced(back, ReasonReplacementGone)
	// Told after the writes below: a link taking the name back meanwhile
	// would have its record deleted under it.
	defer sendNotices(notices)
	_ = b.write(lctx, "mark deleted agent unserved", func() error { return b.st.MarkUnserved(ctx, epoch, ls.key, []string{name}) })
	err := b.write(lctx, "delete agent", func() error { return b.st.DeleteAgent(ctx, epoch, ls.key, name) })
	// Counted whatever the answer (a write whose answer was lost may have
	// landed), still under rosterMu: a register that wrote its rows before
	// this writes them again before its roster change (Register).
	b.mu.Lock()
	b.agentDeletes++
	b.mu.Unlock()
	switch {
	case errors.Is(err, store.ErrAgentInUse):
		return &RegisterError{fmt.Sprintf("agent %q has a conversation behind it and cannot be deleted", name)}
	case errors.Is(err, store.ErrNotFound):
		return &RegisterError{fmt.Sprintf("agent %q is not registered", name)}
	}
	return err
}

// placesLocked counts the agents the leader holds places for against
// Limits.MaxServedAgents: those served, those whose link was lost within the
// link grace (their key is expected back, D5), and, within the provider
// grace after a takeover, those the previous leader served and this one
// does not yet (inherited). The last two keep their places so an honest
// provider coming back is never refused for what strangers registered
// meanwhile; what this leader served and stopped serving (a clean close, a
// register dropping it) gives its place up, in the grace too. served and
// lostUntil are disjoint (a register deletes the one, a loss the other);
// inherited is walked only while the grace lasts.
func (b *Broker) placesLocked() int {
	n := len(b.served) + len(b.lostUntil)
	if b.inGraceLocked() {
		for ref := range b.inherited {
			if _, lost := b.lostUntil[ref]; !lost && b.served[ref] == nil {
				n++
			}
		}
	}
	return n
}

// heldLocked reports whether the roster holds a place for ref
// (placesLocked).
func (b *Broker) heldLocked(ref AgentRef) bool {
	if b.served[ref] != nil {
		return b.releasing[ref] == 0
	}
	if _, lost := b.lostUntil[ref]; lost {
		return true
	}
	return b.inherited[ref] && b.inGraceLocked()
}

// growthLocked is how many places a register of names on ls would add:
// the names of its key nobody holds a place for, less those ls serves and
// the register drops (freed: marked releasing until the roster change, so
// no other register counts them held meanwhile).
func (b *Broker) growthLocked(ls *linkState, names map[string]bool) (grow int, freed []AgentRef) {
	for n := range names {
		if !b.heldLocked(AgentRef{ls.key, n}) {
			grow++
		}
	}
	for n := range ls.names {
		ref := AgentRef{ls.key, n}
		if !names[n] && b.served[ref] == ls && b.releasing[ref] == 0 {
			grow--
			freed = append(freed, ref)
		}
	}
	return grow, freed
}

// markReleasingLocked adds d to the releasing marks of refs.
func (b *Broker) markReleasingLocked(refs []AgentRef, d int) {
	if b.releasing == nil {
		b.releasing = map[AgentRef]int{}
	}
	for _, ref := range refs {
		if b.releasing[ref] += d; b.releasing[ref] <= 0 {
			delete(b.releasing, ref)
		}
	}
}

// Detach forgets a closed link. Only names whose live link is this one go
// offline, so tearing down a replaced link never takes down its replacement.
// Runs the link held are told, in their own lanes. lost is a link that ended
// without the provider's close frame (a transport failure): its held runs
// wait LinkGrace for the key to come back (D5).
func (b *Broker) Detach(l Link, lost bool) {
	b.rosterMu.Lock()
	defer b.rosterMu.Unlock()
	b.mu.Lock()
	ls, ok := b.links[l]
	if !ok {
		b.mu.Unlock()
		return
	}
	delete(b.links, l)
	b.dropKeyLinkLocked(ls)
	ls.bare, ls.free = nil, nil
	ls.detached()
	dropMovedLocked(ls)
	b.metrics.links.Dec()
	var offline []string
	for n := range ls.names {
		ref := AgentRef{ls.key, n}
		if b.served[ref] == ls {
			delete(b.served, ref)
			b.unserved[ref] = b.clock.Now()
			offline = append(offline, n)
			if lost && !ls.withdrawn && b.set.LinkGrace > 0 {
				b.lostUntil[ref] = b.clock.Now().Add(b.set.LinkGrace)
			}
		}
	}
	for ln := range b.byLink[ls] { // goneCmd is queued: the index is not changed here
		ln.q.push(goneCmd{ls, lost})
	}
	b.wakeKeptLocked(ls) // what it sent before a register: nobody to tell now (keep.go)
	epoch, lctx, leading := b.epoch, b.ctx, b.leading
	var notices []nameNotice
	var back []*linkState
	if leading {
		notices = b.freedLocked(ls.key, ls, offline)
		back = b.unservedReplacedLocked(ls.key, offline)
	}
	grace := time.Duration(0)
	if lost && !ls.withdrawn {
		grace = b.set.LinkGrace
	}
	b.mu.Unlock()
	b.log.Info("provider link closed", "provider_key", ls.key, "link", ls.id, "offline", offline, "epoch", epoch)
	if leading && len(offline) > 0 {
		// A lost link's agents are expected back for the link grace, by a
		// leader taking over meanwhile too (recover reads them back).
		_ = b.write(lctx, "mark agents unserved", func() error { return b.st.MarkLost(lctx, epoch, ls.key, offline, grace) })
	}
	// After the write, as a register's notices: a link taking a name back
	// is then written served after it.
	sendNotices(notices)
	// The replaced links of the key that declared a name this one leaves
	// unserved are closed, so that their processes reconnect and take it
	// back (replaced.go).
	b.closeReplaced(back, ReasonReplacementGone)
}

// WhenBare calls bare once l serves no agent and holds no run — no offer
// out to it, no run claimed or held by it — at once if it is so now, else
// when the last run it holds leaves it, unless it registers or ends first.
// A link a delete leaves so holds nothing a link that never registered
// does not, so it is pending again (design.md §The provider wire,
// "Admission"). bare runs under the broker's lock: it must not block nor
// call the broker.
func (b *Broker) WhenBare(l Link, bare func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ls := b.links[l]
	// A replaced link serves nothing either, but is not pending: it
	// registered, and a newer link of its key took its agents; the
	// bound on a key's links holds it (replaced.go).
	if ls == nil || ls.replaced || b.servesLocked(ls) {
		return
	}
	if len(b.byLink[ls]) > 0 {
		ls.bare = bare
		return
	}
	ls.bare = nil
	bare()
}

// servesLocked reports whether ls serves an agent. A name it declared and
// another link of its key took is still in its roster (its going free is
// announced to ls, taken.go) but not served by it: a link whose every
// name was taken or deleted serves nothing (design.md §The provider wire,
// "Admission"). Caller holds b.mu.
func (b *Broker) servesLocked(ls *linkState) bool {
	for n := range ls.names {
		if b.served[AgentRef{ls.key, n}] == ls {
			return true
		}
	}
	return false
}

// HoldsRuns reports whether l holds a run: one it claimed, or took over
// with a report for a run its key held (claimByReport). A link that does
// not register may stay open past the register deadline while it does —
// a process replaced by a newer one of its key finishing its runs (D5) —
// and is closed at a deadline when it holds nothing.
func (b *Broker) HoldsRuns(l Link) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ls := b.links[l]
	if ls == nil {
		return false
	}
	for ln := range b.byLink[ls] {
		if ln.claimedBy == ls {
			return true
		}
	}
	return false
}

// ---- reports from links ----

func (b *Broker) laneFor(l Link, runID string) (_ *lane, _ *linkState, registered, offerable bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ls := b.links[l]
	return b.lanes[runID], ls, registeredLocked(ls), ls != nil && ls.registeredOnce
}

// registeredLocked reports whether ls has registered agents now, as a
// report is read from it: what it reads before its register is a resend of
// its key's earlier rounds, however late its lane gets to it (lane.
// keyAnswers). Caller holds b.mu.
func registeredLocked(ls *linkState) bool { return ls != nil && len(ls.names) > 0 }

// stranger reports whether a report from l for ln comes from a key that is
// not the run's agent's. Such a report is refused at once as for an
// unknown run, never handed to the lane: there it would wait behind an
// offer that is out, so the timing of its answer (and the lane's end, had
// it come first) would tell a stranger about a run it has no part in
// (design.md D15, D16). No stranger's report is ever taken, so refusing
// it here changes no outcome.
func stranger(l Link, ln *lane) bool { return ln != nil && ln.agent.Key != l.Key() }

// Ack hands a provider's verdict to the run's lane, in the read loop's order.
// An ack for a run the broker does not hold is answered "ack refused"
// (D15), as is every ack the lane does not take.
func (b *Broker) Ack(l Link, runID string, v wire.Verdict, reason string) {
	if v == wire.Refused && strings.ContainsRune(reason, 0) {
		// A refusal is recorded verbatim, and PostgreSQL's text holds no
		// NUL: its end could never be written (it failed the run as a
		// malformed event, told nobody). Refused as a defect of the frame,
		// whatever run it names, so a stranger learns nothing of the run;
		// the offer stays out for the provider's next answer.
		b.refuse(l, kindAck, runID, refusedNULReason)
		return
	}
	ln, ls, reg, offerable := b.laneFor(l, runID)
	if stranger(l, ln) {
		b.refuse(l, kindAck, runID, refusedUnknown)
		return
	}
	if ln == nil || ls == nil || !ln.q.push(verdictCmd{link: ls, v: v, reason: reason, registered: reg, offerable: offerable}) {
		why := b.noLaneReason(l, runID)
		if why == refusedEnded {
			b.keepLateAcked(l, runID, v) // before the refusal is queued
		}
		b.refuse(l, kindAck, runID, why)
	}
}

// Event hands a provider's event to the run's lane. An event for a run the
// broker does not hold is answered "event refused" (D15), as is every event
// the lane does not take.
//
// It waits while the link has EventBacklog events not yet stored: the
// link's read loop calls it, so the provider is not read until its events
// are written (backpressure). The wait ends when the link is detached or
// leadership ends.
func (b *Broker) Event(l Link, runID string, ev json.RawMessage, providerSeq *int64) {
	b.event(l, runID, eventCmd{ev: ev, pseq: providerSeq})
}

// MalformedEvent hands the run's lane an event it cannot read, why saying
// what is wrong with it (an event frame whose event alone failed the strict
// JSON check, wire.RefusedReport): taken from the run's holder it fails the
// run as any event that does not validate (design.md D18); otherwise it is
// refused as Event would refuse it (D15).
func (b *Broker) MalformedEvent(l Link, runID string, why error) {
	b.event(l, runID, eventCmd{bad: why})
}

// OversizedEvent hands the run's lane an event frame over the link's frame
// limit, read through and dropped, why saying how large it was: taken from
// the run's holder it fails the run provider_sent_an_oversized_event, as an
// event over MaxEventBytes does, and counts nothing (design.md D18);
// otherwise it is refused as Event would refuse it (D15).
func (b *Broker) OversizedEvent(l Link, runID string, why error) {
	b.event(l, runID, eventCmd{bad: why, tooBig: true})
}

func (b *Broker) event(l Link, runID string, c eventCmd) {
	ev := c.ev
	b.mu.Lock()
	ln, ls, lctx := b.lanes[runID], b.links[l], b.ctx
	c.registered = registeredLocked(ls)
	c.offerable = ls != nil && ls.registeredOnce
	b.mu.Unlock()
	if stranger(l, ln) {
		b.refuse(l, kindEvent, runID, refusedUnknown)
		return
	}
	if ln == nil || ls == nil {
		b.refuse(l, kindEvent, runID, b.noLaneReason(l, runID))
		return
	}
	ok, ord, changed := ls.backlog.take(len(ev))
	if !ok {
		b.metrics.backpressure.Inc()
		ls.stall.begin()
		defer ls.stall.end()
		var closed <-chan struct{}
		if c, isConn := l.(interface{ ReadStop() <-chan struct{} }); isConn {
			closed = c.ReadStop() // a link closed draining is still read (Register)
		}
		for !ok {
			select {
			case <-changed:
			case <-ls.gone:
				return // the link is closing: nobody to answer
			case <-closed:
				return
			case <-lctx.Done():
				return
			}
			ok, ord, changed = ls.backlog.take(len(ev))
		}
	}
	if c.link, c.ord = ls, ord; !ln.q.push(c) {
		ls.release(c) // the lane ended meanwhile
		b.refuse(l, kindEvent, runID, b.noLaneReason(l, runID))
	}
}

// Reported is called as a query is read from l; the wait it returns
// blocks until every event and finish l sent before the query has been
// handled by its lane — stored (the run's end written, for a finish), or
// refused with an error frame — and reports whether the query may be
// answered. Our SDK takes answered queries after a finish for funduq
// having stored it, and stops resending it (provider/sync.go), so an
// answer must not overtake an event or a finish still waiting in its lane.
// It reports false when the link goes or this node stops leading first:
// those reports may never be taken, the link closes, and the provider
// resends them on its next link.
func (b *Broker) Reported(l Link) (wait func(ctx context.Context) bool) {
	b.mu.Lock()
	ls, lctx := b.links[l], b.ctx
	b.mu.Unlock()
	if ls == nil || lctx == nil {
		return func(context.Context) bool { return true }
	}
	mark := ls.backlog.mark()
	return func(ctx context.Context) bool {
		return ls.backlog.waitPassed(ctx, mark, ls.gone, lctx.Done()) && lctx.Err() == nil
	}
}

// Stalled marks l's read loop waiting for a query slot (funduq not reading
// the link) until the returned end is called: an offer out to it meanwhile
// may have been answered unread, so its lapse is put off (onLapse).
func (b *Broker) Stalled(l Link) (end func()) {
	b.mu.Lock()
	ls := b.links[l]
	b.mu.Unlock()
	if ls == nil {
		return func() {}
	}
	b.metrics.queryWaits.Inc()
	ls.stall.begin()
	return ls.stall.end
}

// EventsWaiting reports the events read from provider links and not yet
// handled by their lanes: in all, and on the link with the most.
func (b *Broker) EventsWaiting() (total, most int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ls := range b.links {
		n, _ := ls.backlog.count()
		total += n
		most = max(most, n)
	}
	return total, most
}

// Finish hands a provider's finish to the run's lane; a finish for a run
// the broker does not hold is answered "finish refused" (D15).
func (b *Broker) Finish(l Link, runID string) {
	ln, ls, reg, offerable := b.laneFor(l, runID)
	if stranger(l, ln) {
		b.refuse(l, kindFinish, runID, refusedUnknown)
		return
	}
	if ln == nil || ls == nil {
		b.refuse(l, kindFinish, runID, b.noLaneReason(l, runID))
		return
	}
	// Held in the link's backlog until the lane has taken or refused it,
	// as an event is until it is stored: a query read after it is not
	// answered before (design.md §The provider wire).
	c := finishCmd{link: ls, ord: ls.backlog.hold(), registered: reg, offerable: offerable}
	if !ln.q.push(c) {
		c.handled()
		b.refuse(l, kindFinish, runID, b.noLaneReason(l, runID))
	}
}

// ---- counting and withdrawal ----

// count records one quality counter against key (persisted, D6) and
// withdraws the key when that counter reaches the tolerance.
func (b *Broker) count(ctx context.Context, key string, c store.Counter) {
	b.mu.Lock()
	epoch := b.epoch
	b.mu.Unlock()
	var q store.Quality
	err := b.write(ctx, "count "+string(c), func() (err error) {
		q, err = b.st.Bump(ctx, epoch, key, c)
		return err
	})
	if err != nil {
		b.log.ErrorContext(ctx, "could not record quality counter", "provider_key", key, "counter", string(c), "err", err)
		return
	}
	b.counted(ctx, key, c, q, epoch)
}

// countForRun is count for abandoned and undelivered, which a run
// contributes at most one of (design.md §Counters): the run's record says
// whether it was counted already, by this leader or an earlier one.
func (b *Broker) countForRun(ctx context.Context, key string, c store.Counter, runID string) {
	b.mu.Lock()
	epoch := b.epoch
	b.mu.Unlock()
	var q store.Quality
	var counted bool
	err := b.write(ctx, "count "+string(c), func() (err error) {
		q, counted, err = b.st.BumpForRun(ctx, epoch, key, c, runID)
		return err
	})
	if err != nil {
		b.log.ErrorContext(ctx, "could not record quality counter", "provider_key", key, "counter", string(c),
			"run_id", runID, "err", err)
		return
	}
	if !counted {
		b.log.InfoContext(ctx, "run counted against its provider already; not counted again", "provider_key", key,
			"counter", string(c), "run_id", runID, "epoch", epoch)
		return
	}
	b.counted(ctx, key, c, q, epoch)
}

// counted is what follows a count that landed: the metric, the log line,
// and the withdrawal at tolerance (D6).
func (b *Broker) counted(ctx context.Context, key string, c store.Counter, q store.Quality, epoch int64) {
	b.metrics.quality.WithLabelValues(string(c)).Inc()
	n := q.Get(c)
	b.log.WarnContext(ctx, "provider behaved abnormally", "provider_key", key, "counter", string(c), "count", n,
		"tolerance", b.set.QualityTolerance, "epoch", epoch)
	if b.set.QualityTolerance > 0 && n >= int64(b.set.QualityTolerance) {
		b.withdraw(ctx, key, q)
	}
}

// withdraw takes every agent key serves out of service (D6): nothing more is
// offered to it, its queued runs take the ordinary no-provider road, and
// runs it already holds finish and report over the open link, which is
// closed once they have ended. A register on its current links is refused;
// a new link is the way back.
func (b *Broker) withdraw(ctx context.Context, key string, q store.Quality) {
	b.rosterMu.Lock()
	defer b.rosterMu.Unlock()
	b.mu.Lock()
	var names []string
	var told []Link
	for _, ls := range b.links {
		if ls.key != key {
			continue
		}
		ls.withdrawn = true
		told = append(told, ls.link)
		for n := range ls.names {
			ref := AgentRef{key, n}
			if b.served[ref] == ls {
				delete(b.served, ref)
				b.unserved[ref] = b.clock.Now()
				names = append(names, n)
			}
			delete(b.displaced, ref) // no link of a withdrawn key may take it back
		}
	}
	epoch := b.epoch
	b.mu.Unlock()
	sort.Strings(names)
	b.log.WarnContext(ctx, "provider withdrawn from service at tolerance", "provider_key", key, "agents", names,
		"misdeclared", q.Misdeclared, "unanswered", q.Unanswered, "answered_late", q.AnsweredLate,
		"abandoned", q.Abandoned, "undelivered", q.Undelivered, "tolerance", b.set.QualityTolerance, "epoch", epoch)
	b.metrics.withdrawals.Inc()
	// Each link is told now, not at its next register (D6): it serves
	// nothing more, and what it holds may still finish over it.
	notice := fmt.Sprintf("%v (misdeclared %d, unanswered %d, answered_late %d, abandoned %d, undelivered %d; tolerance %d); runs this link holds may still finish over it",
		ErrWithdrawn, q.Misdeclared, q.Unanswered, q.AnsweredLate, q.Abandoned, q.Undelivered, b.set.QualityTolerance)
	if frame, err := wire.Marshal(wire.Error{Type: wire.TypeError, Message: notice}); err == nil {
		for _, l := range told {
			_ = l.Send(frame) // a closed link has nobody to tell
		}
	}
	// Then each is closed once the runs it holds have ended (at once if it
	// holds none): a provider that reconnects after any closed link, as the
	// reference SDK does, is served again on its next link, where one that
	// only logs the error frame stayed on a link serving nothing
	// (design.md D6).
	b.mu.Lock()
	for _, l := range told {
		ls := b.links[l]
		if ls == nil {
			continue // closed meanwhile
		}
		if len(b.byLink[ls]) == 0 {
			closeWithdrawn(l)
			continue
		}
		ls.free = func() { closeWithdrawn(l) }
	}
	b.mu.Unlock()
	_ = b.write(ctx, "record withdrawal", func() error { return b.st.SetWithdrawn(ctx, epoch, key, true) })
	_ = b.write(ctx, "mark withdrawn agents unserved", func() error { return b.st.MarkUnserved(ctx, epoch, key, names) })
}

func (b *Broker) wakeSweep() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Idle reports whether every lane is idle with an empty queue: nothing
// is about to happen until something from outside does (tests wait on it).
func (b *Broker) Idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.lanes {
		if !l.q.idle() {
			return false
		}
	}
	return true
}

// Snapshot is a read-only view for tests, metrics and the operator.
type Snapshot struct {
	Lanes    map[string]run.Status
	InFlight map[string]int
	Served   []AgentRef
	Links    int
	// Providers is every provider key with an open link, sorted by key.
	Providers []ProviderView
}

// ProviderView is one provider key as the roster holds it.
type ProviderView struct {
	Key string
	// Links is how many open links the key has (more than one only while
	// a replaced link is being torn down).
	Links int
	// Agents are the names its links serve now, sorted: all of them in a
	// Snapshot, the first ones in a ProviderPage. AgentCount counts them
	// all.
	Agents     []string
	AgentCount int
	// Declared is its maxConcurrentRuns (nil: unlimited); InFlight the
	// places taken (offers out and claimed runs).
	Declared *int
	InFlight int
	// Withdrawn: every open link of the key was withdrawn at tolerance (a
	// key that came back on a new link serves again).
	Withdrawn bool
	// Since is when its oldest open link attached (the broker's clock).
	Since time.Time
}

// Snapshot copies the broker's live state.
func (b *Broker) Snapshot() Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Snapshot{Lanes: map[string]run.Status{}, InFlight: map[string]int{}, Links: len(b.links)}
	for id, l := range b.lanes {
		s.Lanes[id] = l.status
	}
	for k, bk := range b.buckets {
		s.InFlight[k] = bk.inFlight
	}
	for ref := range b.served {
		s.Served = append(s.Served, ref)
	}
	sort.Slice(s.Served, func(i, j int) bool { return s.Served[i].String() < s.Served[j].String() })
	byKey := map[string]*ProviderView{}
	for _, ls := range b.links {
		pv := byKey[ls.key]
		if pv == nil {
			pv = &ProviderView{Key: ls.key, Since: ls.opened, Withdrawn: true}
			if bk := b.buckets[ls.key]; bk != nil {
				pv.InFlight = bk.inFlight
				if bk.declared != nil {
					d := *bk.declared
					pv.Declared = &d
				}
			}
			byKey[ls.key] = pv
		}
		pv.Links++
		pv.Withdrawn = pv.Withdrawn && ls.withdrawn
		if ls.opened.Before(pv.Since) {
			pv.Since = ls.opened
		}
		for n := range ls.names {
			if b.served[AgentRef{ls.key, n}] == ls {
				pv.Agents = append(pv.Agents, n)
			}
		}
	}
	for _, pv := range byKey {
		sort.Strings(pv.Agents)
		pv.AgentCount = len(pv.Agents)
		s.Providers = append(s.Providers, *pv)
	}
	sort.Slice(s.Providers, func(i, j int) bool { return s.Providers[i].Key < s.Providers[j].Key })
	return s
}

// Held counts what the broker holds in each of its maps keyed by run, link
// or key, by map name, so a soak can check from the outside that nothing
// grows per run or per link once everything has settled. The ended-runs
// ring is bounded by design (ended.go) and reported for its figures.
func (b *Broker) Held() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	heads := 0
	for _, m := range b.headsByKey {
		heads += len(m)
	}
	byLink := 0
	for _, m := range b.byLink {
		byLink += len(m)
	}
	lostHeld := 0
	for _, m := range b.lostHeld {
		lostHeld += len(m)
	}
	return map[string]int{
		"lanes": len(b.lanes), "addressing": len(b.addressing), "threads": len(b.threads),
		"headsByKey": len(b.headsByKey), "headsByKey.threads": heads, "byLink": len(b.byLink), "byLink.lanes": byLink,
		"lostHeld": len(b.lostHeld), "lostHeld.lanes": lostHeld,
		"links": len(b.links), "keyLinks": len(b.keyLinks), "served": len(b.served), "buckets": len(b.buckets), "unserved": len(b.unserved),
		"expected": len(b.expected), "requeued": len(b.requeued), "lostUntil": len(b.lostUntil), "ended": len(b.ended.ids),
	}
}

// DescribeLane is run id's lane as the broker holds it, in one line, for a
// test's failure message and an operator's debugging: its state fields
// (those guarded by b.mu), the links named in them, the link serving its
// agent, and how many commands wait in its queue. "" when it has no lane.
func (b *Broker) DescribeLane(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.lanes[id]
	if l == nil {
		return ""
	}
	link := func(ls *linkState) string {
		if ls == nil {
			return "-"
		}
		open := b.links[ls.link] == ls
		return fmt.Sprintf("link %d (open %t, replaced %t, registered once %t)", ls.id, open, ls.replaced, ls.registeredOnce)
	}
	l.q.mu.Lock()
	queued, busy := len(l.q.items), l.q.busy
	l.q.mu.Unlock()
	return fmt.Sprintf("status %s; offered to %s; claimed by %s; passed %t; orphan %t (link lost %t); reserved %t; "+
		"link wait %t; dispatch pending %t; ended %t; end stored %t; cancel %t; agent served by %s; queue %d, busy %t",
		l.status, link(l.offeredTo), link(l.claimedBy), l.passed, l.orphan, l.linkLost, l.reserved != "",
		l.linkWait, l.dispatchPending, l.ended, l.endStored, l.cancelRequested, link(b.served[l.agent]), queued, busy)
}
