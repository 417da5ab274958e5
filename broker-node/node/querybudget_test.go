package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/core/wire"
)

// A provider's queries that PostgreSQL is slow to answer hold at most part
// of the broker's pool: another provider's run is claimed, its events
// stored and its end written while they are still held (design.md §The
// provider wire, "Admission"). Each of a link's eight queries took a pooled
// connection, so one link with slow queries held the whole pool and every
// lane's write waited behind them.
func TestSlowQueriesLeaveThePoolToTheRuns(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.DBMaxConns = 4 })
	slow := h.Connect(0xe4, nil)
	slow.Register("asker")
	_, thread, _ := h.CompletedRun(slow, "asker", "a thread to ask about")

	honest := h.Connect(0xe5, nil)
	honest.Register("echo")
	// The run is made (its message stored) and offered before the lock:
	// the door's insert would wait on it too.
	r, rthread := h.Door(honest.Key, "echo", "", "hello")
	if f := honest.Offer(); f.RunID != r {
		t.Fatalf("offer %s, want %s", f.RunID, r)
	}

	// What the queries read is locked: each waits in PostgreSQL on a
	// pooled connection until the lock goes (or its own time limit).
	release := h.Hold(`LOCK TABLE thread_messages IN ACCESS EXCLUSIVE MODE`)
	for i := range 8 {
		slow.SendRaw(fmt.Sprintf(`{"type":"query","queryId":"q%d","method":"thread_messages","params":{"threadId":%q}}`, i, thread))
	}
	h.Eventually("the slow queries wait on the lock", h.LockWaitsOn("thread_messages"))

	// The honest run writes nothing the lock holds: no reply message,
	// only its claim, its events and its end.
	honest.Accept(r)
	honest.Event(r, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, rthread, r))
	honest.Event(r, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, rthread, r))
	honest.Finish(r)
	h.WaitStatus(r, run.Completed)
	if !h.LockWaitsOn("thread_messages")() {
		t.Fatal("the honest run ended only once the slow queries had given up the pool: they held every connection")
	}
	evs := h.Events(r)
	if len(evs) == 0 || evs[len(evs)-1]["type"] != "RUN_FINISHED" {
		t.Fatalf("the honest run's stored events: %v", evs)
	}

	// Released, every slow query is answered.
	release()
	seen := map[string]bool{}
	for range 8 {
		var res wire.QueryResult
		slow.Expect(wire.TypeQueryResult, &res)
		if seen[res.QueryID] || (res.Error == "") == (len(res.Result) == 0) {
			t.Fatalf("query answered %+v", res)
		}
		seen[res.QueryID] = true
		if res.Error == "" {
			var msgs []json.RawMessage
			if err := json.Unmarshal(res.Result, &msgs); err != nil || len(msgs) == 0 {
				t.Fatalf("query %s answered %s", res.QueryID, res.Result)
			}
		}
	}
	nothingCounted(t, h, honest.Key, "an honest run beside slow queries")
}

// A query that waits out its time limit for the broker-wide budget (a pool
// of two: one connection for queries) is answered with an error saying so,
// as one whose read ran out of time is: none is dropped, and the link is
// read meanwhile. Once the lock goes the budget is whole again.
func TestQueriesPastTheBudgetAreAnswered(t *testing.T) {
	h := nodetest.StartWith(t, func(c *config.Broker) { c.DBMaxConns = 2 },
		func(o *node.Options) { o.QueryTimeout = 3 * time.Second })
	p := h.Connect(0xe6, nil)
	p.Register("asker")
	_, thread, _ := h.CompletedRun(p, "asker", "a thread to ask about")
	query := func(id string) {
		p.SendRaw(fmt.Sprintf(`{"type":"query","queryId":%q,"method":"thread_messages","params":{"threadId":%q}}`, id, thread))
	}

	release := h.Hold(`LOCK TABLE thread_messages IN ACCESS EXCLUSIVE MODE`)
	query("q0")
	h.Eventually("the first query waits on the lock", h.LockWaitsOn("thread_messages"))
	query("q1") // these two wait for the budget the first holds
	query("q2")
	answers := map[string]wire.QueryResult{}
	take := func(f []byte) {
		t.Helper()
		var res wire.QueryResult
		if typ, _ := wire.PeekType(f); typ != wire.TypeQueryResult || json.Unmarshal(f, &res) != nil || answers[res.QueryID].QueryID != "" {
			t.Fatalf("unexpected frame: %s", f)
		}
		answers[res.QueryID] = res
	}
	for _, f := range p.ReadBarrier() { // the read loop goes on
		take(f)
	}
	for _, f := range p.Barrier() { // a query touching no storage takes no place
		take(f)
	}
	for len(answers) < 3 {
		_, f := p.Next()
		take(f)
	}
	for id, res := range answers {
		switch res.Error {
		case "funduq is answering too many queries right now; ask again", // waited out its time for the budget
			"funduq could not read the thread right now": // took it, and waited out its read
		default:
			t.Fatalf("query %s answered %+v", id, res)
		}
	}
	m := metrics(t, h)
	waited := 0
	for _, g := range regexp.MustCompile(`funduq_broker_query_budget_waits_total\{outcome="\w+"\} (\d+)`).FindAllStringSubmatch(m, -1) {
		n, _ := strconv.Atoi(g[1])
		waited += n
	}
	if waited != 2 {
		t.Fatalf("%d queries counted waiting for the budget, want 2:\n%s", waited, grepLines(m, "query_budget"))
	}

	release()
	query("q3")
	var res wire.QueryResult
	p.Expect(wire.TypeQueryResult, &res)
	if res.QueryID != "q3" || res.Error != "" || len(res.Result) == 0 {
		t.Fatalf("after the lock: %+v", res)
	}
}

// A pool of one connection (the database URL's pool_max_conns, which the
// settings' check does not see) is refused at start: it cannot be split
// between queries and the runs' writes.
func TestPoolOfOneIsRefused(t *testing.T) {
	_, prefix := redistest.Client(t)
	cfg := config.Broker{
		Storage:  config.Storage{DatabaseURL: storetest.URL(t) + "&pool_max_conns=1", RedisURL: redistest.URL()},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
		Waits:    config.Waits{LeaseTTL: 10 * time.Second, DeliverTimeout: 5 * time.Second, UnservedTimeout: 45 * time.Second, UndeliveredWindow: time.Hour},
		NodeID:   "one", AdvertiseURL: "http://127.0.0.1:1",
	}
	n, err := node.New(context.Background(), cfg, node.Options{RedisPrefix: prefix})
	if err == nil {
		n.Close()
		t.Fatal("a node started on a pool of one connection")
	}
	if !strings.Contains(err.Error(), "FUNDUQ_DB_MAX_CONNS") {
		t.Fatalf("refused with %q, want it to name FUNDUQ_DB_MAX_CONNS", err)
	}
}
