package main

// The failover chaos test: the leader goes away at a seeded moment while
// runs are in flight, and what an operator and a caller would notice is
// checked. Two real broker nodes (nodetest) lead in turn over one database
// and one Redis prefix; two AG-UI doors serve the callers; an SDK provider
// and a raw-wire provider (chaos_raw_test.go) serve the runs. Each node
// reaches its PostgreSQL, its Redis and its providers through gates
// (chaos_gate_test.go), so the leader can be frozen (every byte stops, later
// resumes), cut off for good (its links drop without a close frame), stopped
// (SIGTERM) or asked to hand over by the operator's `lease handover`.
//
// The test command runs seeds 1–3; more with
//
//	FUNDUQ_FAILOVER_SEEDS=1-40 go test -race -count=1 -run TestFailoverChaos ./broker-node/
//	go test -race -count=1 -run TestFailoverChaos ./broker-node/ -failover.seeds=17
//
// FUNDUQ_FAILOVER_RUNS sets the runs per seed (default 6–10, seeded).
//
// A seed fixes the schedule (which runs start when, at which door, for which
// provider; the raw provider's manners; the fault and its moment), not the
// interleaving of goroutines.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/console"
	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/redistest"
	runstatus "github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/seeds"
	"github.com/funduq/funduq-go/internal/syncbuf"
	"github.com/funduq/funduq-go/provider"
)

var failoverSeeds = flag.String("failover.seeds", "", "the failover chaos test's seeds (1,2,5-9); default $FUNDUQ_FAILOVER_SEEDS or 1-3")

// chaosGuard bounds every wait: a hang detector, never a timing assertion.
const chaosGuard = 20 * time.Second

// The schedule's scale and the settings the nodes run with. The lease is
// real time; the broker's waits (grace, deliver timeout) run on each node's
// fake clock, which the test only moves at the end, to show that nothing
// was left waiting for a grace.
const (
	chaosTTL   = time.Second
	chaosGrace = 30 * time.Second
	chaosLink  = 5 * time.Second
	chaosSpan  = 1500 * time.Millisecond // runs start within it
)

func TestFailoverChaos(t *testing.T) { forFailoverSeeds(t, "TestFailoverChaos", failoverChaos) }

// forFailoverSeeds runs one failover chaos test per seed of
// -failover.seeds, else $FUNDUQ_FAILOVER_SEEDS, else 1-3, and says how to
// rerun a failed one.
func forFailoverSeeds(t *testing.T, name string, test func(*testing.T, uint64)) {
	spec := *failoverSeeds
	if spec == "" {
		spec = os.Getenv("FUNDUQ_FAILOVER_SEEDS")
	}
	if spec == "" {
		spec = "1-3"
	}
	list, err := seeds.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range list {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			test(t, seed)
			if t.Failed() {
				t.Logf("FAILED seed %d; rerun with: FUNDUQ_FAILOVER_SEEDS=%d go test -race -count=1 -run '^%s$' ./broker-node/", seed, seed, name)
			}
		})
	}
}

// chaosNode is a broker node behind its gates.
type chaosNode struct {
	h               *nodetest.Harness
	pg, redis, link *gate
	id              string
}

func (n *chaosNode) front() string { return "http://" + n.link.addr() }

func (n *chaosNode) freeze() { n.pg.freeze(); n.redis.freeze(); n.link.freeze() }
func (n *chaosNode) thaw()   { n.pg.thaw(); n.redis.thaw(); n.link.thaw() }
func (n *chaosNode) cut()    { n.pg.cutAll(); n.redis.cutAll(); n.link.cutAll() }
func (n *chaosNode) restore() {
	n.pg.restore()
	n.redis.restore()
	n.link.restore()
}

var probe = &http.Client{Timeout: 300 * time.Millisecond}

// ready is the node's own /readyz, probed directly with a short timeout (a
// frozen node's probe of its stores hangs).
func (n *chaosNode) ready() bool {
	resp, err := probe.Get(n.h.URL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

type chaosCaller struct {
	n       int
	at      time.Duration
	agent   string // "sdk" or "raw"
	door    int
	dropAt  int // resume the stream at the other door after this many events (0: never)
	id      string
	err     error
	events  []sseEv // what the caller saw, across both streams
	resumed bool
}

type sseEv struct {
	id   int
	data string
}

// chaosPair starts node-a (leading) and node-b (standby) behind their
// gates, a balancer in front of them, two doors, and the lease tool's
// environment. mut adjusts both nodes' settings.
func chaosPair(t *testing.T, mut func(*config.Broker)) (a, b *chaosNode, lb string, doors []string, env map[string]string) {
	t.Helper()
	dbURL := storetest.URL(t)
	_, prefix := redistest.Client(t)
	redisURL := redistest.URL()

	mk := func(id string) *chaosNode {
		return &chaosNode{id: id, pg: newGate(t, hostOf(t, dbURL)), redis: newGate(t, hostOf(t, redisURL)), link: newGate(t, "")}
	}
	a, b = mk("node-a"), mk("node-b")
	settings := func(n *chaosNode) func(*config.Broker) {
		return func(c *config.Broker) {
			c.NodeID = n.id
			c.DatabaseURL, c.RedisURL = withHost(t, dbURL, n.pg.addr()), withHost(t, redisURL, n.redis.addr())
			c.AdvertiseURL = n.front()
			c.LeaseTTL, c.ProviderGrace, c.LinkGrace = chaosTTL, chaosGrace, chaosLink
			c.ConsoleToken = chaosConsoleToken
			if mut != nil {
				mut(c)
			}
		}
	}
	logTo := func(o *node.Options) { o.Logger = chaosLogger(t) }
	a.h = nodetest.StartOn(t, withHost(t, dbURL, a.pg.addr()), withHost(t, redisURL, a.redis.addr()), prefix, settings(a), logTo)
	a.link.setTarget(hostOf(t, a.h.URL))
	b.h = a.h.PeerWith(b.id, settings(b), logTo)
	b.link.setTarget(hostOf(t, b.h.URL))
	lb = leaderBalancer(t, balanced{a.ready, a.front()}, balanced{b.ready, b.front()})
	doors = []string{chaosDoor(t, dbURL, redisURL, prefix), chaosDoor(t, dbURL, redisURL, prefix)}
	env = map[string]string{"FUNDUQ_DATABASE_URL": dbURL, "FUNDUQ_REDIS_URL": redisURL, "FUNDUQ_REDIS_PREFIX": prefix}

	return a, b, lb, doors, env
}

func failoverChaos(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xfa11))
	a, b, lb, doors, env := chaosPair(t, nil)

	// The providers.
	sdkSigner, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(byte(0x10 + seed%100)))
	rawSigner, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(byte(0x90 + seed%100)))
	var sdkCap *int
	if c := rng.IntN(4); c > 0 {
		sdkCap = nodetest.Limit(c)
	}
	sdkEvents := 1 + rng.IntN(5)
	sdkGap := time.Duration(rng.IntN(80)) * time.Millisecond
	var sdkMu sync.Mutex
	sdkStarts := map[string]int{}
	sdkDone := map[string]bool{}
	client, err := provider.New(provider.Config{
		BaseURL: lb, Signer: sdkSigner, FunduqKey: a.h.Node.FunduqKey(), MaxConcurrentRuns: sdkCap,
		Backoff:      provider.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		PingInterval: 200 * time.Millisecond,
		Logger:       chaosLogger(t),
		Agents: []provider.Agent{{Name: "sdk", Handler: func(ctx context.Context, r *provider.Run) error {
			sdkMu.Lock()
			sdkStarts[r.ID]++
			sdkMu.Unlock()
			for _, ev := range sdkScript(r.ThreadID, r.ID, sdkEvents) {
				if err := r.Emit(ctx, json.RawMessage(ev)); err != nil {
					return err
				}
				time.Sleep(sdkGap)
			}
			sdkMu.Lock()
			sdkDone[r.ID] = true
			sdkMu.Unlock()
			return nil
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sdkCtx, sdkStop := context.WithCancel(context.Background())
	sdkExit := make(chan struct{})
	go func() { defer close(sdkExit); _ = client.Run(sdkCtx) }()
	defer func() { sdkStop(); <-sdkExit }()
	raw := newRawProv(rawSigner, lb, a.h.Node.FunduqKey(), "raw", rng)
	raw.start()
	defer raw.close()
	<-client.Ready()
	a.h.Eventually("both providers are registered", func() bool {
		raw.mu.Lock()
		defer raw.mu.Unlock()
		return raw.cur != nil
	})

	// The schedule.
	nruns := 6 + rng.IntN(5)
	if v, err := strconv.Atoi(os.Getenv("FUNDUQ_FAILOVER_RUNS")); err == nil && v > 0 {
		nruns = v
	}
	callers := make([]*chaosCaller, nruns)
	for i := range callers {
		c := &chaosCaller{n: i + 1, at: time.Duration(rng.Int64N(int64(chaosSpan))), door: rng.IntN(2), agent: "sdk"}
		if rng.IntN(2) == 1 {
			c.agent = "raw"
		}
		if rng.IntN(3) == 0 {
			c.dropAt = 1 + rng.IntN(3)
		}
		callers[i] = c
	}
	kinds := []string{"handover", "sigterm", "freeze", "cut", "redis"}
	kind := kinds[rng.IntN(len(kinds))]
	faultAt := 100*time.Millisecond + time.Duration(rng.Int64N(int64(chaosSpan)))
	freezeFor := chaosTTL + time.Duration(rng.Int64N(int64(2*time.Second)))
	// Sometimes the new leader goes away too, soon after it took over (D7:
	// a leader that takes over in turn expects the providers back as well).
	kind2 := ""
	if kind != "sigterm" && rng.IntN(3) == 0 {
		kind2 = kinds[rng.IntN(len(kinds))]
	}
	secondAfter := time.Duration(rng.Int64N(int64(600 * time.Millisecond)))
	// Sometimes the raw provider's link drops without a close frame shortly
	// before the fault, so the leader goes while that link's grace runs
	// (D5: the new leader expects it back too).
	dropBefore := time.Duration(-1)
	if rng.IntN(2) == 0 {
		dropBefore = time.Duration(rng.Int64N(int64(400 * time.Millisecond)))
	}
	t.Logf("seed %d: %d runs within %v; SDK capacity %v, %d content events every %v; %s; leader %s at +%v (frozen for %v); then %q %v after the takeover; raw link dropped %v before (-1: not)",
		seed, len(callers), chaosSpan, capString(sdkCap), sdkEvents, sdkGap, raw, kind, faultAt, freezeFor, kind2, secondAfter, dropBefore)
	firstEpoch := leaderEpoch(t, a.h)

	began := time.Now()
	var wg sync.WaitGroup
	for _, c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(c.at)
			key := sdkSigner.PublicKeyHex()
			if c.agent == "raw" {
				key = rawSigner.PublicKeyHex()
			}
			c.follow(doors, key)
		}()
	}
	// fault takes victim away as kind says and returns once it is done
	// (a frozen node thawed; a cut one stays cut until restore).
	fault := func(kind string, victim *chaosNode) {
		switch kind {
		case "handover":
			var out, errb bytes.Buffer
			if code := run([]string{"lease", "handover", "--wait", "15s"}, env, &out, &errb); code != 0 {
				t.Errorf("lease handover: exit %d: %s %s", code, out.String(), errb.String())
			}
		case "sigterm":
			victim.h.Shutdown()
		case "freeze":
			victim.freeze()
			time.Sleep(freezeFor)
			victim.thaw()
		case "cut":
			victim.cut()
		case "redis":
			// Only its Redis goes: the leader cannot renew and fences
			// itself (D10) while its database and its links still work.
			victim.redis.cutAll()
		}
		t.Logf("+%v: %s %s done", time.Since(began).Round(time.Millisecond), kind, victim.id)
	}
	if dropBefore >= 0 {
		time.Sleep(max(faultAt-dropBefore, 0))
		if raw.dropLink() {
			t.Logf("+%v: the raw provider's link dropped", time.Since(began).Round(time.Millisecond))
		}
		time.Sleep(time.Until(began.Add(faultAt)))
	} else {
		time.Sleep(faultAt)
	}
	fault(kind, a)
	b.h.Eventually("node-b leads", b.ready)
	leader, other := b, a
	faults := 1
	if kind2 != "" {
		if kind == "cut" || kind == "redis" {
			a.restore()
		}
		time.Sleep(secondAfter)
		fault(kind2, b)
		a.h.Eventually("node-a leads again", a.ready)
		leader, other, faults = a, b, 2
	}
	wg.Wait()

	// Every run ends: each provider behaves and re-attaches within moments,
	// far inside the grace, so each run completes without the grace running
	// out (the fake clocks have not moved).
	var ids []string
	for _, c := range callers {
		if c.err != nil {
			t.Errorf("run #%d: %v", c.n, c.err)
			continue
		}
		ids = append(ids, c.id)
	}
	st := leader.h.Store
	terminal := func() bool {
		for _, id := range ids {
			r, err := st.GetRun(context.Background(), id)
			if err != nil || !r.Status.Terminal() {
				return false
			}
		}
		return true
	}
	if ok := until(chaosGuard, terminal); !ok {
		// Show what the grace would have done with them.
		leader.h.Advance(chaosGrace + chaosLink + time.Second)
		until(chaosGuard, terminal)
	}
	until(chaosGuard, func() bool { return raw.done() })
	for _, c := range callers {
		if c.id == "" {
			continue
		}
		r, err := st.GetRun(context.Background(), c.id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != runstatus.Completed {
			evs, _ := st.EventsAfter(context.Background(), c.id, 0, 1000)
			var types []string
			for _, e := range evs {
				var v struct{ Type string }
				_ = json.Unmarshal(e.Event, &v)
				types = append(types, v.Type)
			}
			sdkMu.Lock()
			done := sdkDone[c.id]
			sdkMu.Unlock()
			t.Errorf("run #%d %s (%s): %s/%s (owner epoch %d), want completed: its provider behaved and came back within the grace; stored %v; SDK handler returned %v",
				c.n, c.id, c.agent, r.Status, r.FailureReason, r.OwnerEpoch, types, done)
			continue
		}
		var want [][]byte
		if c.agent == "raw" {
			want, _ = raw.expected(c.id)
		} else {
			for _, ev := range sdkScript(r.ThreadID, c.id, sdkEvents) {
				want = append(want, []byte(ev))
			}
		}
		evs, err := st.EventsAfter(context.Background(), c.id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var stored []string
		for _, e := range evs {
			stored = append(stored, canon(e.Event))
		}
		var wantS []string
		for _, w := range want {
			wantS = append(wantS, canon(w))
		}
		if !slices.Equal(stored, wantS) {
			t.Errorf("run #%d %s (%s): stored events differ from what the provider sent (each once, in order):\n stored %v\n   sent %v", c.n, c.id, c.agent, stored, wantS)
		}
		// The caller's stream (across a resume at the other door) gives
		// each stored event once, in order, with its seq as id (D9).
		var seen []string
		for i, e := range c.events {
			if e.id != i+1 {
				t.Errorf("run #%d %s: the caller's event %d has id %d, want %d (resumed %v): %v", c.n, c.id, i, e.id, i+1, c.resumed, c.events)
				break
			}
			seen = append(seen, canonStream(e.data))
		}
		var storedS []string
		for _, s := range stored {
			storedS = append(storedS, canonStream(s))
		}
		if !slices.Equal(seen, storedS) {
			t.Errorf("run #%d %s: the caller saw\n %v\nwant the stored\n %v", c.n, c.id, seen, storedS)
		}
	}
	// The SDK ran each handler once (D7: a run in flight is never restarted).
	sdkMu.Lock()
	for id, n := range sdkStarts {
		if n != 1 {
			t.Errorf("the SDK handler of %s started %d times", id, n)
		}
	}
	sdkMu.Unlock()

	// No honest provider is blamed or withdrawn (D6, §Counters).
	for _, k := range []struct{ name, key string }{{"SDK", sdkSigner.PublicKeyHex()}, {"raw", rawSigner.PublicKeyHex()}} {
		q, err := st.GetQuality(context.Background(), k.key)
		if err != nil && err != store.ErrNotFound {
			t.Fatal(err)
		}
		if q.Misdeclared+q.Unanswered+q.AnsweredLate+q.Abandoned+q.Undelivered > 0 || q.WithdrawnAt != nil {
			t.Errorf("the %s provider, which behaved, was counted: %+v", k.name, q)
		}
	}

	// The operator sees the truth: the last node standing leads under a
	// later epoch, and the lease tool and each node's /metrics say so.
	epoch := leaderEpoch(t, leader.h)
	if epoch < firstEpoch+int64(faults) {
		t.Errorf("%s leads under epoch %d, want one after %d per failover (%d)", leader.id, epoch, firstEpoch, faults)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"lease", "status", "--json"}, env, &out, &errb); code != 0 {
		t.Fatalf("lease status: exit %d: %s", code, errb.String())
	}
	var ls leaseStatus
	if err := json.Unmarshal(out.Bytes(), &ls); err != nil || !ls.Leading || ls.Node != leader.id || ls.Epoch != epoch || ls.AdvertiseURL != leader.front() {
		t.Errorf("lease status after the failover: %s (%v); want %s leading under epoch %d at %s", strings.TrimSpace(out.String()), err, leader.id, epoch, leader.front())
	}
	until(chaosGuard, func() bool { return leader.h.Node.Broker.Snapshot().Links == 2 })
	m := scrape(t, leader.h.URL)
	for name, want := range map[string]float64{"funduq_broker_is_leader": 1, "funduq_broker_epoch": float64(epoch), "funduq_broker_provider_links": 2} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s's /metrics: %s = %v (present %v), want %v", leader.id, name, got, ok, want)
		}
	}
	checkConsole(t, leader, epoch, sdkSigner.PublicKeyHex(), rawSigner.PublicKeyHex())
	// A caller asking any door who is online sees both agents (D8: served
	// under the current epoch, whose leader is alive).
	for i, d := range doors {
		if on := onlineAgents(t, d); !on["sdk"] || !on["raw"] {
			t.Errorf("door %d's GET /agents after the failover: online %v, want sdk and raw", i+1, on)
		}
	}
	other.restore()
	if stopped := kind == "sigterm" && other == a || kind2 == "sigterm" && other == b; !stopped {
		other.h.Eventually(other.id+" knows it does not lead", func() bool {
			return scrape(t, other.h.URL)["funduq_broker_is_leader"] == 0
		})
		if n := scrape(t, other.h.URL)["funduq_broker_provider_links"]; n != 0 {
			t.Errorf("%s's /metrics after the failover: %v provider links, want 0", other.id, n)
		}
		if other.ready() {
			t.Errorf("%s's /readyz says it leads after the failover", other.id)
		}
	}
	// Nothing was offered to the raw provider again but what a takeover
	// offers again (D7: a run nobody held when the leader went).
	raw.mu.Lock()
	for id, n := range raw.offers {
		if n > 1+faults {
			t.Errorf("the raw provider was offered %s %d times across %d failovers", id, n, faults)
		}
	}
	raw.mu.Unlock()
	t.Logf("settled at +%v", time.Since(began).Round(time.Millisecond))
}

func capString(c *int) string {
	if c == nil {
		return "unlimited"
	}
	return strconv.Itoa(*c)
}

func sdkScript(thread, id string, n int) []string {
	evs := []string{fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id),
		`{"type":"TEXT_MESSAGE_START","messageId":"s1","role":"assistant"}`}
	for i := range n {
		evs = append(evs, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"s1","delta":"sdk-%d "}`, i))
	}
	return append(evs, `{"type":"TEXT_MESSAGE_END","messageId":"s1"}`,
		fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
}

// canon is an event as a comparable string: its JSON with keys sorted.
func canon(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// canonStream drops what the door writes into RUN_STARTED and RUN_FINISHED
// (funduq's ids, design.md §The doors) and leaves the rest.
func canonStream(s string) string {
	var v map[string]any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	delete(v, "threadId")
	delete(v, "runId")
	out, _ := json.Marshal(v)
	return string(out)
}

func leaderEpoch(t testing.TB, h *nodetest.Harness) int64 {
	t.Helper()
	var epoch int64
	h.Eventually("the node leads", func() bool {
		var on bool
		on, epoch = h.Node.Broker.Leading()
		return on
	})
	return epoch
}

func until(bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// scrape reads a node's /metrics into name → value (unlabelled samples).
func scrape(t testing.TB, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = f
		}
	}
	return out
}

// chaosDoor is one AG-UI door over the shared stores.
func chaosDoor(t testing.TB, dbURL, redisURL, prefix string) string {
	t.Helper()
	deps, err := door.Connect(config.Door{
		Storage:  config.Storage{DatabaseURL: dbURL, RedisURL: redisURL, RedisPrefix: prefix},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
	}, door.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(deps.Close)
	ag, err := agui.New(agui.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, p := range agui.Patterns() {
		mux.Handle(p, ag)
	}
	mux.Handle("GET /agents", door.Agents(deps.Store, nil, deps.Limits.AgentsHiddenAfter))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

var callerSeq atomic.Int64

// follow starts the caller's run at its door and reads its stream to the
// end; with dropAt it leaves after that many events and resumes at the
// other door with Last-Event-ID (D9).
func (c *chaosCaller) follow(doors []string, key string) {
	thread := fmt.Sprintf("t-chaos-%d-%d", time.Now().UnixNano(), callerSeq.Add(1))
	body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[{"id":"u1","role":"user","content":"run %d"}]}`, thread, "c-"+thread, c.n)
	ctx, cancel := context.WithTimeout(context.Background(), chaosGuard)
	defer cancel()
	limit := c.dropAt
	id, n, err := readStream(ctx, http.MethodPost, doors[c.door]+"/agui/"+key+"/"+c.agent, body, -1, limit, &c.events)
	c.id = id
	if err != nil {
		c.err = err
		return
	}
	if limit > 0 && n == limit {
		c.resumed = true
		_, _, err = readStream(ctx, http.MethodGet, doors[1-c.door]+"/runs/"+id+"/events", "", c.events[len(c.events)-1].id, 0, &c.events)
		c.err = err
	}
}

// readStream reads an SSE stream until it ends, or until limit events were
// read (limit > 0). It returns the run id the door named.
func readStream(ctx context.Context, method, u, body string, lastID, limit int, into *[]sseEv) (string, int, error) {
	return readStreamEach(ctx, method, u, body, lastID, limit, into, nil)
}

// readStreamEach is readStream calling each (when not nil) once the door
// answered 200 (with 0) and after each event read (with their count).
func readStreamEach(ctx context.Context, method, u, body string, lastID, limit int, into *[]sseEv, each func(n int)) (string, int, error) {
	if each == nil {
		each = func(int) {}
	}
	req, _ := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if lastID >= 0 {
		req.Header.Set("Last-Event-ID", strconv.Itoa(lastID))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", 0, fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, b)
	}
	each(0)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	var runID string
	var ev sseEv
	n := 0
	started := false // the resume's RUN_STARTED was read
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ": funduq run "):
			if runID == "" {
				runID = strings.TrimPrefix(line, ": funduq run ")
			}
		case strings.HasPrefix(line, "id:"):
			ev.id, _ = strconv.Atoi(strings.TrimSpace(line[3:]))
		case strings.HasPrefix(line, "data:"):
			ev.data += strings.TrimSpace(line[5:])
		case line == "":
			// A resumed stream opens with a RUN_STARTED of the door's, with
			// no id (agui/stream.go: a stream's first event is always one),
			// then, without ids, the openings of what was open at lastID
			// (design.md §The doors, "A resume from inside a message"): a
			// caller keeping its state has them already.
			if ev.data != "" && ev.id == 0 && n == 0 && lastID > 0 &&
				(!started && strings.Contains(ev.data, `"RUN_STARTED"`) || started && reopening(ev.data)) {
				started = true
				ev = sseEv{}
				continue
			}
			if ev.data != "" {
				*into = append(*into, ev)
				n++
				each(n)
				if limit > 0 && n == limit {
					return runID, n, nil
				}
			}
			ev = sseEv{}
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() != nil {
		return runID, n, fmt.Errorf("the stream did not end within %v: %w", chaosGuard, err)
	}
	return runID, n, sc.Err()
}

// reopening reports whether event data is one a resume sends again to
// reopen what was open at its Last-Event-ID (agui/resume.go).
func reopening(data string) bool {
	var e struct {
		Type string `json:"type"`
	}
	if json.Unmarshal([]byte(data), &e) != nil {
		return false
	}
	switch e.Type {
	case "TEXT_MESSAGE_START", "TOOL_CALL_START", "REASONING_START", "REASONING_MESSAGE_START",
		"STEP_STARTED", "SUBAGENT_STARTED", "THINKING_START", "THINKING_TEXT_MESSAGE_START":
		return true
	}
	return false
}

// chaosLogs keeps each test's node and SDK logs in memory (cheap enough
// not to change the timing much, unlike writing them out), and writes them
// to a file only when the test failed.
var chaosLogs sync.Map // *testing.T name → *syncbuf.Buffer

func chaosLogger(t testing.TB) *slog.Logger {
	v, loaded := chaosLogs.LoadOrStore(t.Name(), &syncbuf.Buffer{})
	buf := v.(*syncbuf.Buffer)
	if !loaded {
		t.Cleanup(func() {
			chaosLogs.Delete(t.Name())
			if !t.Failed() {
				return
			}
			path := filepath.Join(os.TempDir(), "funduq-failover-"+strings.NewReplacer("/", "_", "=", "-").Replace(t.Name())+".log")
			err := os.WriteFile(path, []byte(buf.String()), 0o644)
			if err == nil {
				t.Logf("the nodes' and the SDK's logs are in %s", path)
			}
		})
	}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testLog is the SDK's logger: FUNDUQ_TEST_SDK_LOG turns it on (apart from
// the nodes' FUNDUQ_TEST_LOG, since its debug lines change the timing).
func testLog() *slog.Logger {
	if os.Getenv("FUNDUQ_TEST_SDK_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

const chaosConsoleToken = "chaos-console-token-0123"

// checkConsole reads the leader's console state and checks what an
// operator would act on after the failover: who leads, the providers
// connected with nothing in flight, no counter moved, no run left active
// and no failure.
func checkConsole(t testing.TB, leader *chaosNode, epoch int64, keys ...string) {
	t.Helper()
	s := consoleState(t, leader)
	say := func(format string, a ...any) { t.Errorf("%s's console: "+format, append([]any{leader.id}, a...)...) }
	if s.Node.Role != "leader" || s.Node.Epoch != epoch || s.Leader.NodeID != leader.id || s.Leader.Epoch != epoch ||
		s.Leader.LeaseHolder != leader.id || s.Leader.AdvertiseURL != leader.front() {
		say("node %+v, leader %+v; want %s leading under epoch %d", s.Node, s.Leader, leader.id, epoch)
	}
	if len(s.Errors) > 0 {
		say("errors %v", s.Errors)
	}
	if s.Providers.Source != "roster" || len(s.Providers.List) != len(keys) {
		say("providers %+v, want the %d connected", s.Providers, len(keys))
	}
	for _, p := range s.Providers.List {
		if p.Links != 1 || p.InFlight == nil || *p.InFlight != 0 || p.Withdrawn {
			inFlight := "unknown"
			if p.InFlight != nil {
				inFlight = strconv.Itoa(*p.InFlight)
			}
			say("provider %s: %d links, in flight %s, withdrawn %v; want 1 link, 0 in flight", p.Key[:8], p.Links, inFlight, p.Withdrawn)
		}
	}
	for _, q := range s.Quality.List {
		for c, n := range q.Counters {
			if n != 0 && (c == "misdeclared" || c == "unanswered" || c == "answered_late" || c == "abandoned" || c == "undelivered") {
				say("provider %s counted %s %d", q.Key[:8], c, n)
			}
		}
	}
	for _, st := range []string{"queued", "offering", "running", "cancelling"} {
		if n, ok := s.Runs.ByStatus[st]; n != 0 || !ok {
			say("%d runs %s (counted %v)", n, st, ok)
		}
	}
	// The console estimates the ended and paused runs (design.md §The
	// operator console); the test counts them itself.
	var ended int64
	if err := leader.h.Store.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM runs WHERE status IN ('input-required', 'failed', 'cancelled')`).Scan(&ended); err != nil || ended != 0 {
		say("%d runs paused, failed or cancelled (%v)", ended, err)
	}
	if len(s.Failures.List) > 0 {
		say("failures %+v", s.Failures.List)
	}
	// The nodes seen: the leader as leader, no other node as one once a
	// lease TTL has passed (a node that went away stops announcing; its
	// last word goes stale).
	oneLeader := func(s console.State) bool {
		found := false
		for _, n := range s.Nodes {
			if n.Role == "leader" && n.NodeID != leader.id {
				return false
			}
			found = found || n.Role == "leader"
		}
		return found
	}
	if !oneLeader(s) && !until(chaosGuard, func() bool { return oneLeader(consoleState(t, leader)) }) {
		say("nodes seen %+v, want %s alone as leader", consoleState(t, leader).Nodes, leader.id)
	}
}

func consoleState(t testing.TB, n *chaosNode) console.State {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, n.h.URL+"/console/api/state", nil)
	req.Header.Set("Authorization", "Bearer "+chaosConsoleToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s console.State
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != 200 {
		t.Fatalf("console state: %d %v", resp.StatusCode, err)
	}
	return s
}

// onlineAgents is a door's GET /agents: the names it says are online.
func onlineAgents(t testing.TB, doorURL string) map[string]bool {
	t.Helper()
	resp, err := http.Get(doorURL + "/agents")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Agents []door.AgentJSON `json:"agents"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET /agents: %d %v", resp.StatusCode, err)
	}
	on := map[string]bool{}
	for _, a := range body.Agents {
		if a.Online {
			on[a.Name] = true
		}
	}
	return on
}
