package console

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
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
}

// ProviderJSON is one connected provider.
type ProviderJSON struct {
	Key         string   `json:"key"`
	Fingerprint string   `json:"fingerprint"`
	Name        string   `json:"name"`
	Agents      []string `json:"agents"`
	Links       int      `json:"links"`
	// Capacity is the declared maxConcurrentRuns (null: unlimited, or
	// unknown on a standby); InFlight is null on a standby.
	Capacity  *int       `json:"capacity"`
	Unlimited bool       `json:"unlimited"`
	InFlight  *int       `json:"inFlight"`
	Withdrawn bool       `json:"withdrawn"`
	Since     *time.Time `json:"since,omitempty"`
}

// QualityJSON: every provider's counters, withdrawn ones marked.
type QualityJSON struct {
	Tolerance int           `json:"tolerance"`
	List      []QualityItem `json:"list"`
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

// RunsJSON: runs by status, the oldest queued and the longest running.
type RunsJSON struct {
	ByStatus       map[string]int64 `json:"byStatus"`
	OldestQueued   *RunAgeJSON      `json:"oldestQueued"`
	LongestRunning *RunAgeJSON      `json:"longestRunning"`
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

// FailuresJSON: the runs that failed within the window, by reason.
type FailuresJSON struct {
	WindowMS int64         `json:"windowMs"`
	List     []FailureJSON `json:"list"`
}

// FailureJSON is one failure reason.
type FailureJSON struct {
	Reason string    `json:"reason"`
	Count  int64     `json:"count"`
	Last   time.Time `json:"last"`
}

// Statuses are the run statuses in the order the console lists them.
var Statuses = []string{"queued", "offering", "running", "cancelling", "input-required", "completed", "failed", "cancelled"}

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
	if seen, err := Seen(ctx, o.Redis, o.NodesPrefix); err != nil {
		fail("nodes", err)
	} else {
		s.Nodes = seen
	}

	// Names and fingerprints from the database; the roster from memory.
	rows, err := o.Store.ListProviders(ctx)
	if err != nil {
		fail("providers", err)
	}
	byKey := map[string]store.ProviderRow{}
	for _, p := range rows {
		byKey[p.PublicKey] = p
	}
	s.Providers.List = []ProviderJSON{}
	if leading {
		s.Providers.Source = "roster"
		for _, pv := range o.Broker.Snapshot().Providers {
			row := byKey[pv.Key]
			in := pv.InFlight
			p := ProviderJSON{Key: pv.Key, Fingerprint: row.Fingerprint, Name: row.DisplayName, Agents: pv.Agents,
				Links: pv.Links, Capacity: pv.Declared, Unlimited: pv.Declared == nil, InFlight: &in, Withdrawn: pv.Withdrawn}
			if p.Agents == nil {
				p.Agents = []string{}
			}
			since := pv.Since.UTC()
			p.Since = &since
			s.Providers.List = append(s.Providers.List, p)
		}
	} else {
		s.Providers.Source = "database"
		for _, row := range rows {
			if len(row.Online) == 0 {
				continue
			}
			s.Providers.List = append(s.Providers.List, ProviderJSON{Key: row.PublicKey, Fingerprint: row.Fingerprint,
				Name: row.DisplayName, Agents: row.Online})
		}
	}

	s.Quality = QualityJSON{Tolerance: o.Tolerance, List: []QualityItem{}}
	if qs, err := o.Store.AllQuality(ctx); err != nil {
		fail("quality", err)
	} else {
		for _, q := range qs {
			item := QualityItem{Key: q.ProviderKey, Fingerprint: byKey[q.ProviderKey].Fingerprint, Name: byKey[q.ProviderKey].DisplayName,
				Counters: map[string]int64{}, Withdrawn: q.WithdrawnAt != nil, WithdrawnAt: q.WithdrawnAt}
			for _, c := range []store.Counter{store.Misdeclared, store.Unanswered, store.AnsweredLate, store.Abandoned,
				store.Undelivered, store.Completions, store.Refused, store.FailedLLM} {
				item.Counters[string(c)] = q.Get(c)
			}
			s.Quality.List = append(s.Quality.List, item)
		}
	}

	s.Runs.ByStatus = map[string]int64{}
	s.Failures = FailuresJSON{WindowMS: o.FailureWindow.Milliseconds(), List: []FailureJSON{}}
	if ov, err := o.Store.RunsOverview(ctx, o.FailureWindow); err != nil {
		fail("runs", err)
	} else {
		for _, st := range Statuses {
			s.Runs.ByStatus[st] = ov.ByStatus[st]
		}
		s.Runs.OldestQueued, s.Runs.LongestRunning = ageJSON(ov.OldestQueued), ageJSON(ov.LongestRunning)
		for _, f := range ov.Failures {
			s.Failures.List = append(s.Failures.List, FailureJSON{Reason: f.Reason, Count: f.Count, Last: f.Last.UTC()})
		}
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

// announcement is what a node writes under NodesPrefix+<node id>.
type announcement struct {
	NodeID       string `json:"nodeId"`
	AdvertiseURL string `json:"advertiseUrl"`
	Role         string `json:"role"`
	At           int64  `json:"at"` // unix milliseconds
}

// Announce records, every ttl/3 until ctx ends, that this node is alive
// and whether it leads, under a key that expires after ttl; a change of
// role is written within a quarter second. It deletes the key when ctx
// ends. The console lists these as the nodes seen.
func Announce(ctx context.Context, rdb redis.UniversalClient, prefix, nodeID, advertiseURL string, ttl time.Duration,
	leading func() bool) {
	key := prefix + nodeID
	role := func() string {
		if leading() {
			return "leader"
		}
		return "standby"
	}
	write := func(r string) {
		b, _ := json.Marshal(announcement{NodeID: nodeID, AdvertiseURL: advertiseURL, Role: r, At: time.Now().UnixMilli()})
		wctx, cancel := context.WithTimeout(ctx, max(ttl/3, time.Second))
		_ = rdb.Set(wctx, key, b, ttl).Err()
		cancel()
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
			rdb.Del(dctx, key)
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

// Seen lists the nodes announced under prefix, sorted by id.
func Seen(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]SeenJSON, error) {
	var keys []string
	iter := rdb.Scan(ctx, 0, escapeGlob(prefix)+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	out := []SeenJSON{}
	if len(keys) == 0 {
		return out, nil
	}
	vals, err := rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	for _, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		var a announcement
		if json.Unmarshal([]byte(str), &a) != nil {
			continue
		}
		out = append(out, SeenJSON{NodeID: a.NodeID, AdvertiseURL: a.AdvertiseURL, Role: a.Role, SeenAgoMS: max(now-a.At, 0)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out, nil
}

// escapeGlob escapes Redis SCAN pattern characters in a literal prefix.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
