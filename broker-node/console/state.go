package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/core/store"
)

// State is the JSON of GET /console/api/state.
type State struct {
	GeneratedAt time.Time     `json:"generatedAt"`
	Node        NodeJSON      `json:"node"`
	Leader      LeaderJSON    `json:"leader"`
	Nodes       []SeenJSON    `json:"nodes"`
	Providers   ProvidersJSON `json:"providers"`
	Quality     QualityJSON   `json:"quality"`
	Runs        RunsJSON      `json:"runs"`
	Failures    FailuresJSON  `json:"failures"`
	// Errors lists the parts that could not be read (the rest is shown).
	Errors []string `json:"errors"`
}

// NodeJSON is the node answering.
type NodeJSON struct {
	ID           string `json:"id"`
	AdvertiseURL string `json:"advertiseUrl"`
	Role         string `json:"role"` // leader | standby
	Epoch        int64  `json:"epoch"`
}

// LeaderJSON is who leads: the fencing row and the Redis lease.
type LeaderJSON struct {
	Epoch        int64     `json:"epoch"`
	NodeID       string    `json:"nodeId"` // the holder of record (broker_leader)
	AdvertiseURL string    `json:"advertiseUrl"`
	AcquiredAt   time.Time `json:"acquiredAt"`
	// LeaseHolder is who holds the Redis lease now ("" nobody): it differs
	// from NodeID between a lease change and the new epoch.
	LeaseHolder string `json:"leaseHolder"`
	LeaseLeftMS int64  `json:"leaseLeftMs"`
	LeaseTTLMS  int64  `json:"leaseTtlMs"`
}

// SeenJSON is one node that announced itself within a lease TTL.
type SeenJSON struct {
	NodeID       string `json:"nodeId"`
	AdvertiseURL string `json:"advertiseUrl"`
	Role         string `json:"role"`
	SeenAgoMS    int64  `json:"seenAgoMs"`
}

// ProvidersJSON: the connected providers. Source is "roster" (this node
// leads: its memory) or "database" (a standby: the agents the leader's
// epoch serves, without capacity or in-flight counts).
type ProvidersJSON struct {
	Source string         `json:"source"`
	List   []ProviderJSON `json:"list"`
	// Total is how many there are: List is the first ProvidersListed.
	Total int `json:"total"`
}

// ProviderJSON is one connected provider. Name is its first NameChars
// characters; Agents the first AgentsListed of AgentCount: a provider
// chooses both, up to a frame, and the state is read every 1.5 s.
type ProviderJSON struct {
	Key         string   `json:"key"`
	Fingerprint string   `json:"fingerprint"`
	Name        string   `json:"name"`
	Agents      []string `json:"agents"`
	AgentCount  int      `json:"agentCount"`
	Links       int      `json:"links"`
	// Capacity is the declared maxConcurrentRuns (null: unlimited, or
	// unknown on a standby); InFlight is null on a standby.
	Capacity  *int       `json:"capacity"`
	Unlimited bool       `json:"unlimited"`
	InFlight  *int       `json:"inFlight"`
	Withdrawn bool       `json:"withdrawn"`
	Since     *time.Time `json:"since,omitempty"`
}

// NameChars is how much of a provider's name the state carries,
// AgentsListed how many of its agents, and ProvidersListed how many
// providers, and quality records, it lists (with their totals).
const (
	NameChars       = 512
	AgentsListed    = 100
	ProvidersListed = 100
)

// clipName is a provider's name as the state carries it.
func clipName(name string) string {
	n := 0
	for i := range name {
		if n == NameChars {
			return name[:i]
		}
		n++
	}
	return name
}

// listAgents fills p's agents from the first of them, sorted (all, or
// at least AgentsListed), and how many there are.
func (p *ProviderJSON) listAgents(first []string, count int) {
	p.AgentCount = count
	p.Agents = first[:min(len(first), AgentsListed):min(len(first), AgentsListed)]
	if p.Agents == nil {
		p.Agents = []string{}
	}
}

// QualityJSON: every provider's counters, withdrawn ones marked.
type QualityJSON struct {
	Tolerance int           `json:"tolerance"`
	List      []QualityItem `json:"list"`
	// Total is how many records there are: List is the first
	// ProvidersListed, the withdrawn first.
	Total int `json:"total"`
}

// QualityItem is one provider's record.
type QualityItem struct {
	Key         string           `json:"key"`
	Fingerprint string           `json:"fingerprint"`
	Name        string           `json:"name"`
	Counters    map[string]int64 `json:"counters"`
	Withdrawn   bool             `json:"withdrawn"`
	WithdrawnAt *time.Time       `json:"withdrawnAt"`
}

// RunsJSON: the active runs by status, counted exactly; PostgreSQL's
// estimate of the paused and ended ones; the oldest queued and the longest
// running. The page polls every 1.5 s, and ended runs pile up without
// bound (retention is off by default): counting them exactly would read
// the whole table each time (design.md §The operator console, "What the
// runs figures mean").
type RunsJSON struct {
	// ByStatus holds every one of store.ActiveStatuses, exact.
	ByStatus map[string]int64 `json:"byStatus"`
	// Estimated holds each of EstimatedStatuses PostgreSQL's statistics
	// know of, as of EstimatedAt; a status absent is unknown (too rare for
	// the sample, or no statistics yet).
	Estimated map[string]int64 `json:"estimated"`
	// EstimatedTotal is the estimate of all runs stored (nil: none yet).
	EstimatedTotal *int64      `json:"estimatedTotal"`
	EstimatedAt    *time.Time  `json:"estimatedAt"`
	OldestQueued   *RunAgeJSON `json:"oldestQueued"`
	LongestRunning *RunAgeJSON `json:"longestRunning"`
}

// RunAgeJSON is one run and how long it has waited or run.
type RunAgeJSON struct {
	RunID       string    `json:"runId"`
	ProviderKey string    `json:"providerKey"`
	AgentName   string    `json:"agentName"`
	Status      string    `json:"status"`
	Since       time.Time `json:"since"`
	AgeMS       int64     `json:"ageMs"`
}

// FailuresJSON: the runs that failed within the window, by reason (its
// first store.OverviewReasonChars characters) and whose words it is, the store.OverviewReasons
// most frequent; OmittedReasons and OmittedRuns count the rest.
type FailuresJSON struct {
	WindowMS       int64         `json:"windowMs"`
	List           []FailureJSON `json:"list"`
	OmittedReasons int64         `json:"omittedReasons"`
	OmittedRuns    int64         `json:"omittedRuns"`
}

// FailureJSON is one failure reason. By says whose words it is: "funduq"
// or "provider" (a refusal's reason, a RUN_ERROR's code) — a provider may
// use funduq's reason names, so the text alone cannot say.
type FailureJSON struct {
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	Count  int64     `json:"count"`
	Last   time.Time `json:"last"`
}

// EstimatedStatuses are the run statuses the console shows PostgreSQL's
// estimate of: the paused and the ended, which pile up (a caller may never
// answer a pause). The active ones (store.ActiveStatuses) are exact.
var EstimatedStatuses = []string{"input-required", "completed", "failed", "cancelled"}

func (h *Handler) collect(ctx context.Context) State {
	o := h.o
	s := State{GeneratedAt: time.Now().UTC(), Errors: []string{}, Nodes: []SeenJSON{}}
	fail := func(what string, err error) {
		o.Log.WarnContext(ctx, "console: read failed", "what", what, "err", err)
		s.Errors = append(s.Errors, what+": "+err.Error())
	}
	leading, epoch := o.Broker.Leading()
	s.Node = NodeJSON{ID: o.NodeID, AdvertiseURL: o.AdvertiseURL, Role: "standby", Epoch: epoch}
	if leading {
		s.Node.Role = "leader"
	}

	s.Leader.LeaseTTLMS = o.LeaseTTL.Milliseconds()
	if l, err := o.Store.CurrentLeader(ctx); err != nil {
		fail("leader", err)
	} else {
		s.Leader.Epoch, s.Leader.NodeID, s.Leader.AdvertiseURL, s.Leader.AcquiredAt = l.Epoch, l.Holder, l.AdvertiseURL, l.AcquiredAt
	}
	if hd, err := lease.ReadHolder(ctx, o.Redis, o.LeaseKey); err == nil {
		s.Leader.LeaseHolder, s.Leader.LeaseLeftMS = hd.NodeID, hd.Left.Milliseconds()
	} else if !errors.Is(err, lease.ErrNoHolder) {
		fail("lease", err)
	}
	if seen, err := Seen(ctx, o.Redis, o.NodesKey); err != nil {
		fail("nodes", err)
	} else {
		s.Nodes = seen
	}

	// The roster from memory (leading) or the database (a standby), and
	// the quality records: the first ProvidersListed of each and how many
	// there are. Keys cost a stranger nothing (design.md §The provider
	// wire, "Admission"), so neither list is read or sent whole every
	// 1.5 s; the withdrawn come first, then by key, so a page shows what
	// an operator acts on and rows do not jump between refreshes.
	s.Providers.List = []ProviderJSON{}
	names := func(what string, keys []string) map[string]store.ProviderRow {
		byKey, err := o.Store.ProvidersByKey(ctx, keys)
		if err != nil {
			fail(what, err)
		}
		return byKey
	}
	if leading {
		s.Providers.Source = "roster"
		// A page of the roster, not a Snapshot: that sorts every served
		// agent under the broker's lock, up to the whole roster.
		views, total := o.Broker.ProviderPage(ProvidersListed, AgentsListed)
		s.Providers.Total = total
		keys := make([]string, len(views))
		for i, pv := range views {
			keys[i] = pv.Key
		}
		byKey := names("providers", keys)
		for _, pv := range views {
			row := byKey[pv.Key]
			in := pv.InFlight
			p := ProviderJSON{Key: pv.Key, Fingerprint: row.Fingerprint, Name: clipName(row.DisplayName),
				Links: pv.Links, Capacity: pv.Declared, Unlimited: pv.Declared == nil, InFlight: &in, Withdrawn: pv.Withdrawn}
			p.listAgents(pv.Agents, pv.AgentCount)
			since := pv.Since.UTC()
			p.Since = &since
			s.Providers.List = append(s.Providers.List, p)
		}
	} else {
		s.Providers.Source = "database"
		rows, total, err := o.Store.OnlineProviders(ctx, ProvidersListed)
		if err != nil {
			fail("providers", err)
		}
		s.Providers.Total = total
		for _, row := range rows {
			p := ProviderJSON{Key: row.PublicKey, Fingerprint: row.Fingerprint, Name: clipName(row.DisplayName)}
			p.listAgents(row.Online, len(row.Online))
			s.Providers.List = append(s.Providers.List, p)
		}
	}

	s.Quality = QualityJSON{Tolerance: o.Tolerance, List: []QualityItem{}}
	if qs, total, err := o.Store.QualityPage(ctx, ProvidersListed); err != nil {
		fail("quality", err)
	} else {
		s.Quality.Total = total
		keys := make([]string, len(qs))
		for i, q := range qs {
			keys[i] = q.ProviderKey
		}
		byKey := names("quality names", keys)
		for _, q := range qs {
			item := QualityItem{Key: q.ProviderKey, Fingerprint: byKey[q.ProviderKey].Fingerprint, Name: clipName(byKey[q.ProviderKey].DisplayName),
				Counters: map[string]int64{}, Withdrawn: q.WithdrawnAt != nil, WithdrawnAt: q.WithdrawnAt}
			for _, c := range []store.Counter{store.Misdeclared, store.Unanswered, store.AnsweredLate, store.Abandoned,
				store.Undelivered, store.Completions, store.Refused, store.FailedLLM} {
				item.Counters[string(c)] = q.Get(c)
			}
			s.Quality.List = append(s.Quality.List, item)
		}
	}

	s.Runs.ByStatus, s.Runs.Estimated = map[string]int64{}, map[string]int64{}
	s.Failures = FailuresJSON{WindowMS: o.FailureWindow.Milliseconds(), List: []FailureJSON{}}
	if ov, err := o.Store.RunsOverview(ctx, o.FailureWindow); err != nil {
		fail("runs", err)
	} else {
		for _, st := range store.ActiveStatuses {
			s.Runs.ByStatus[st] = ov.ByStatus[st]
		}
		for _, st := range EstimatedStatuses {
			if n, ok := ov.Estimated[st]; ok {
				s.Runs.Estimated[st] = n
			}
		}
		if ov.EstimatedTotal >= 0 {
			total := ov.EstimatedTotal
			s.Runs.EstimatedTotal = &total
		}
		if ov.EstimatedAt != nil {
			at := ov.EstimatedAt.UTC()
			s.Runs.EstimatedAt = &at
		}
		s.Runs.OldestQueued, s.Runs.LongestRunning = ageJSON(ov.OldestQueued), ageJSON(ov.LongestRunning)
		for _, f := range ov.Failures {
			by := "funduq"
			if f.ByProvider {
				by = "provider"
			}
			s.Failures.List = append(s.Failures.List, FailureJSON{Reason: f.Reason, By: by, Count: f.Count, Last: f.Last.UTC()})
		}
		s.Failures.OmittedReasons, s.Failures.OmittedRuns = ov.OmittedReasons, ov.OmittedRuns
	}
	return s
}

func ageJSON(r *store.RunAge) *RunAgeJSON {
	if r == nil {
		return nil
	}
	return &RunAgeJSON{RunID: r.RunID, ProviderKey: r.ProviderKey, AgentName: r.AgentName, Status: r.Status,
		Since: r.Since.UTC(), AgeMS: r.Age.Milliseconds()}
}

// announcement is what a node writes in the nodes hash, under its id.
type announcement struct {
	NodeID       string `json:"nodeId"`
	AdvertiseURL string `json:"advertiseUrl"`
	Role         string `json:"role"`
	At           int64  `json:"at"`    // unix milliseconds
	TTLMS        int64  `json:"ttlMs"` // stale after At+TTLMS
	// Instance is the announcing process's random token (IDWatch): two
	// processes under one node id write different ones.
	Instance string `json:"instance,omitempty"`
}

// swapScript writes a node's announcement and returns the one it replaced,
// in one step: read apart from the write, another process's write landing
// between the two would go unseen.
var swapScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return old`)

// IDWatch tells whether another live process announces under this node's
// id (design.md §Deployment, "One node id per node"): two nodes given one
// FUNDUQ_NODE_ID look like one to the lease, the leader row and the
// console. Each process announces with a token of its own; an entry under
// our id carrying another token is another process's. Only an entry
// written after our own write counts: the one found before it may be our
// previous process's, which a restart leaves behind until its TTL, and
// that process is gone. Another live process rewrites its entry every
// announcement, so it is read again after ours; the watch holds the
// finding for a TTL after the last such read, so it does not flap when
// two writes of ours fall between two of the other's.
//
// A duplicate is told (an ERROR, a counter, /readyz), never refused: a
// node that stopped on a duplicate would stop behind its own previous
// process's entry after a restart (we cannot tell that entry from a live
// process's until it is rewritten), and stop both nodes of a real
// duplicate, an outage an operator's copy-paste should not cause.
type IDWatch struct {
	instance   string
	log        *slog.Logger
	onConflict func()

	mu       sync.Mutex
	wrote    bool      // an announcement of ours has landed
	otherAt  time.Time // another process's entry was last read then
	otherURL string    // its advertise URL
	flagged  bool      // the ERROR was logged and not cleared since
	hold     time.Duration
}

// NewIDWatch makes a process's watch with a random instance token. It
// logs on log and calls onConflict (a counter's Inc) once per duplicate
// found, and again when the other process's advertise URL changes.
func NewIDWatch(log *slog.Logger, onConflict func()) *IDWatch {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
	if onConflict == nil {
		onConflict = func() {}
	}
	return &IDWatch{instance: hex.EncodeToString(b[:]), log: log, onConflict: onConflict}
}

// Duplicate reports whether another live process announced under this
// node's id within the last TTL.
func (w *IDWatch) Duplicate() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flagged && time.Since(w.otherAt) < w.hold
}

// observe takes in the entry our write replaced (prev, "" for none);
// landed is false when the write failed.
func (w *IDWatch) observe(ctx context.Context, nodeID, advertiseURL string, ttl time.Duration, prev string, landed bool) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hold = ttl
	var a announcement
	now := time.Now()
	if landed && w.wrote && prev != "" && json.Unmarshal([]byte(prev), &a) == nil &&
		a.Instance != "" && a.Instance != w.instance && now.UnixMilli() <= a.At+a.TTLMS {
		w.otherAt = now
		if !w.flagged || a.AdvertiseURL != w.otherURL {
			w.log.ErrorContext(ctx, "another live process announces under this node id: give each node its own FUNDUQ_NODE_ID",
				"node_id", nodeID, "advertise", advertiseURL, "other_advertise", a.AdvertiseURL)
			w.onConflict()
		}
		w.flagged, w.otherURL = true, a.AdvertiseURL
	} else if w.flagged && now.Sub(w.otherAt) >= ttl {
		w.flagged = false
		w.log.InfoContext(ctx, "no other process announces under this node id now", "node_id", nodeID)
	}
	w.wrote = w.wrote || landed
}

// Announce records, every ttl/3 until ctx ends, that this node is alive
// and whether it leads, as a field of the hash at key (one small hash, so
// reading it never scans the keyspace); a change of role is written within
// a quarter second. It removes its field when ctx ends; a node that dies
// goes stale after ttl and the next reader drops it. The console lists
// these as the nodes seen. Each write also reads the entry it replaces,
// for w (nil: no watch) to tell another process under nodeID.
func Announce(ctx context.Context, rdb redis.UniversalClient, key, nodeID, advertiseURL string, ttl time.Duration,
	leading func() bool, w *IDWatch) {
	role := func() string {
		if leading() {
			return "leader"
		}
		return "standby"
	}
	instance := ""
	if w != nil {
		instance = w.instance
	}
	write := func(r string) {
		b, _ := json.Marshal(announcement{NodeID: nodeID, AdvertiseURL: advertiseURL, Role: r, At: time.Now().UnixMilli(),
			TTLMS: ttl.Milliseconds(), Instance: instance})
		wctx, cancel := context.WithTimeout(ctx, max(ttl/3, time.Second))
		prev, err := swapScript.Run(wctx, rdb, []string{key}, nodeID, b).Text()
		cancel()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		w.observe(ctx, nodeID, advertiseURL, ttl, prev, err == nil)
	}
	every := max(ttl/3, 10*time.Millisecond)
	check := time.NewTicker(min(every, 250*time.Millisecond))
	defer check.Stop()
	written := role()
	write(written)
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			rdb.HDel(dctx, key, nodeID)
			cancel()
			return
		case <-check.C:
			if r := role(); r != written || time.Since(last) >= every {
				written, last = r, time.Now()
				write(r)
			}
		}
	}
}

// Seen lists the nodes announced in the hash at key and not stale, sorted
// by id; it drops the stale ones from the hash.
func Seen(ctx context.Context, rdb redis.UniversalClient, key string) ([]SeenJSON, error) {
	all, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	out := []SeenJSON{}
	now := time.Now().UnixMilli()
	var stale []string
	for field, v := range all {
		var a announcement
		if json.Unmarshal([]byte(v), &a) != nil || now > a.At+a.TTLMS {
			stale = append(stale, field)
			continue
		}
		out = append(out, SeenJSON{NodeID: a.NodeID, AdvertiseURL: a.AdvertiseURL, Role: a.Role, SeenAgoMS: max(now-a.At, 0)})
	}
	if len(stale) > 0 {
		rdb.HDel(ctx, key, stale...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out, nil
}
