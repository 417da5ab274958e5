package node_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// Registers that PostgreSQL is slow to answer hold at most the query
// budget's part of the broker's pool, as queries do (design.md §The
// provider wire, "Admission"): a register's writes ran on its link's read
// loop on a pooled connection of their own, so as many links as the pool
// has connections — one stranger's fresh keys — each sending a register
// held every connection, and another provider's run waited for all of
// them: without a time limit on a register's writes, for as long as
// storage stayed slow.
func TestSlowRegistersLeaveThePoolToTheRuns(t *testing.T) {
	const pool = 4
	h := nodetest.Start(t, func(c *config.Broker) { c.DBMaxConns = pool })
	honest := h.Connect(0xe7, nil)
	honest.Register("echo")
	// The strangers are known already: registering again updates their
	// providers row, which the lock below holds. One link per key, as
	// many as the pool has connections.
	var strangers []*nodetest.Prov
	for i := range pool {
		s := h.Connect(byte(0x70+i), nil)
		s.Register(fmt.Sprintf("s%d", i))
		strangers = append(strangers, s)
	}
	r, rthread := h.Door(honest.Key, "echo", "", "hello")
	if f := honest.Offer(); f.RunID != r {
		t.Fatalf("offer %s, want %s", f.RunID, r)
	}

	// Storage is slow for the strangers' rows only: the honest run's
	// claim, events and end touch none of them.
	release := h.Hold(`SELECT 1 FROM providers WHERE public_key <> $1 FOR UPDATE`, honest.Key)
	for i, s := range strangers {
		s.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: fmt.Sprintf("s%d", i)}, {Name: fmt.Sprintf("t%d", i)}}})
	}
	// Every register is read: each waits on the lock or for its place.
	budget := broker.QueryBudget(pool)
	h.Eventually("every register waits on the lock or for the budget", func() bool {
		n := lockWaitersOn(t, h, "providers")
		return n == pool || (n == budget && budgetWaiting(t, h) == pool-budget)
	})

	honest.Accept(r)
	honest.Event(r, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, rthread, r))
	honest.Event(r, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, rthread, r))
	honest.Finish(r)
	// Read on a connection of the test's own: the node's pool is what
	// the strangers may have taken.
	h.Eventually("the honest run ends beside the strangers' stuck registers", func() bool {
		return statusOn(t, h, r) == run.Completed
	})
	if !h.LockWaitsOn("providers")() {
		t.Fatal("the strangers' registers gave up the lock before the honest run ended")
	}

	release()
	for _, s := range strangers {
		var reg wire.Registered
		s.Expect(wire.TypeRegistered, &reg)
		if len(reg.Names) != 2 {
			t.Fatalf("registered %v", reg.Names)
		}
	}
	evs := h.Events(r)
	if len(evs) == 0 || evs[len(evs)-1]["type"] != "RUN_FINISHED" {
		t.Fatalf("the honest run's stored events: %v", evs)
	}
	nothingCounted(t, h, honest.Key, "an honest run beside slow registers")
}

// lockWaitersOn counts the backends of h's database waiting behind a lock
// on table, read on the test's own connection.
func lockWaitersOn(t *testing.T, h *nodetest.Harness, table string) int {
	t.Helper()
	var n int
	if err := h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity a
		WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'
		AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = ANY(pg_blocking_pids(a.pid))
			AND l.granted AND l.relation = $1::regclass)`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// statusOn reads run id's status on the test's own connection.
func statusOn(t *testing.T, h *nodetest.Harness, id string) run.Status {
	t.Helper()
	var s string
	if err := h.DB().QueryRow(context.Background(), `SELECT status FROM runs WHERE run_id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return run.Status(s)
}

var budgetWaitingLine = regexp.MustCompile(`(?m)^funduq_broker_query_budget_waiting (\d+)$`)

// budgetWaiting is how many provider requests wait for the query budget
// now (0 when the gauge is missing).
func budgetWaiting(t *testing.T, h *nodetest.Harness) int {
	t.Helper()
	g := budgetWaitingLine.FindStringSubmatch(metrics(t, h))
	if g == nil {
		return 0
	}
	n, _ := strconv.Atoi(g[1])
	return n
}

// A stranger's deleteAgent that PostgreSQL is slow to answer for its own
// rows holds the roster lock (rosterMu) for as long as its writes wait,
// which have no time limit: another key's register, writing only its own
// rows, is never answered meanwhile, nor is any link's close taken
// (Detach). One connection, not the pool, but the broker's roster stalls.
func TestSlowDeleteAgentLeavesOtherRegistersAlone(t *testing.T) {
	t.Skip("docs/design.md §Open questions: provider-sent roster writes have no time limit")
	h := nodetest.Start(t, func(c *config.Broker) { c.DBMaxConns = 4 })
	stranger := h.Connect(0x7a, nil)
	stranger.Register("x", "y")

	release := h.Hold(`SELECT 1 FROM agents WHERE provider_key = $1 FOR UPDATE`, stranger.Key)
	stranger.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "x"})
	h.Eventually("the deleteAgent waits on the lock", h.LockWaitsOn("agents"))

	honest := h.Connect(0x7b, nil)
	honest.Register("echo") // waits for the roster lock the deleteAgent holds
	r, thread, _ := h.CompletedRun(honest, "echo", "hello")
	if statusOn(t, h, r) != run.Completed || thread == "" {
		t.Fatalf("run %s did not complete", r)
	}

	release()
	var d wire.Deleted
	stranger.Expect(wire.TypeDeleted, &d)
	if d.Name != "x" {
		t.Fatalf("deleted %q", d.Name)
	}
}

// A query storm and a register waiting for the budget when the leader
// steps down: the leader stops (its stuck queries and the waiting
// register let go at once, not at a time limit: here five minutes, far
// past the harness's guard), and the next leader answers queries and runs
// while the same storage is still slow.
func TestQueryStormAtStepDown(t *testing.T) {
	const pool = 4
	a := nodetest.StartWith(t, func(c *config.Broker) { c.DBMaxConns = pool },
		func(o *node.Options) { o.QueryTimeout = 5 * time.Minute })
	b := a.PeerWith("node-b", func(c *config.Broker) { c.DBMaxConns = pool }, nil)
	asker := a.Connect(0xe8, nil)
	asker.Register("asker")
	_, thread, _ := a.CompletedRun(asker, "asker", "a thread to ask about")
	query := func(p *nodetest.Prov, id string) {
		p.SendRaw(fmt.Sprintf(`{"type":"query","queryId":%q,"method":"thread_messages","params":{"threadId":%q}}`, id, thread))
	}

	// Another key's run is made and offered before the lock (the door's
	// insert would wait on it); its offer, out at the step-down, is made
	// again by the next leader.
	first := a.Connect(0xea, nil)
	first.Register("echo")
	r, rthread := a.Door(first.Key, "echo", "", "hello")
	if f := first.Offer(); f.RunID != r {
		t.Fatalf("offer %s, want %s", f.RunID, r)
	}

	release := a.Hold(`LOCK TABLE thread_messages IN ACCESS EXCLUSIVE MODE`)
	for i := range 8 {
		query(asker, fmt.Sprintf("q%d", i))
	}
	budget := broker.QueryBudget(pool)
	a.Eventually("the budget's queries wait on the lock", func() bool { return lockWaitersOn(t, a, "thread_messages") == budget })
	late := a.Connect(0xe9, nil)
	late.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "late"}}})
	a.Eventually("the register waits for the budget", func() bool { return budgetWaiting(t, a) == 8-budget+1 })

	a.Shutdown() // the node stops: it waits for every link and query it holds
	b.Eventually("the standby leads", b.Ready)
	for _, p := range []*nodetest.Prov{asker, late} {
		for _, f := range p.Rest() {
			if typ, _ := wire.PeekType(f); typ == wire.TypeRegistered {
				t.Fatalf("registered by a leader that stepped down: %s", f)
			}
		}
	}

	// The lock still held: the new leader runs another key's run, and a
	// query of the asker's waits on the lock, then is answered.
	honest := b.Connect(0xea, nil)
	honest.Register("echo")
	if f := honest.Offer(); f.RunID != r {
		t.Fatalf("offer %s, want %s", f.RunID, r)
	}
	honest.Accept(r)
	honest.Event(r, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, rthread, r))
	honest.Event(r, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, rthread, r))
	honest.Finish(r)
	b.WaitStatus(r, run.Completed)
	asker2 := b.Connect(0xe8, nil)
	asker2.Register("asker")
	query(asker2, "again")
	b.Eventually("the new leader's query waits on the lock", b.LockWaitsOn("thread_messages"))
	release()
	var res wire.QueryResult
	asker2.Expect(wire.TypeQueryResult, &res)
	if res.QueryID != "again" || res.Error != "" || len(res.Result) == 0 {
		t.Fatalf("after the lock: %+v", res)
	}
}

// A register waiting for the query budget is served before the queries
// waiting for it: a register on a slow path waited in turn behind every
// query queued before it — a stranger's eight per link, each up to its
// time limit (here five minutes) — so a new provider's register, writing
// rows nothing holds, was answered only once they had all had their turn,
// past its register deadline.
func TestRegisterGoesBeforeWaitingQueries(t *testing.T) {
	h := nodetest.StartWith(t, func(c *config.Broker) { c.DBMaxConns = 2 }, // a budget of one
		func(o *node.Options) { o.QueryTimeout = 5 * time.Minute })
	asker := h.Connect(0xeb, nil)
	asker.Register("asker")
	_, thread, _ := h.CompletedRun(asker, "asker", "a thread to ask about")
	query := func(id string) {
		asker.SendRaw(fmt.Sprintf(`{"type":"query","queryId":%q,"method":"thread_messages","params":{"threadId":%q}}`, id, thread))
	}
	release := h.Hold(`LOCK TABLE thread_messages IN ACCESS EXCLUSIVE MODE`)
	query("q0")
	h.Eventually("the first query waits on the lock", h.LockWaitsOn("thread_messages"))
	query("q1")
	query("q2")
	h.Eventually("two queries wait for the budget", func() bool { return budgetWaiting(t, h) == 2 })
	newcomer := h.Connect(0xec, nil)
	newcomer.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "echo"}}})
	h.Eventually("the register waits for the budget", func() bool { return budgetWaiting(t, h) == 3 })

	// The first query's read ends (its backend is cut off): its place is
	// the register's, though two queries asked for it first.
	var cut int
	if err := h.DB().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a
		WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'`).Scan(&cut); err != nil || cut != 1 {
		t.Fatalf("cut %d backends: %v", cut, err)
	}
	var reg wire.Registered
	newcomer.Expect(wire.TypeRegistered, &reg)
	h.Eventually("the next query waits on the lock", h.LockWaitsOn("thread_messages"))

	release()
	answers := map[string]wire.QueryResult{}
	for range 3 {
		var res wire.QueryResult
		asker.Expect(wire.TypeQueryResult, &res)
		answers[res.QueryID] = res
	}
	if answers["q0"].Error != wire.QueryUnreadMessage {
		t.Fatalf("the cut query answered %+v", answers["q0"])
	}
	for _, id := range []string{"q1", "q2"} {
		if res := answers[id]; res.Error != "" || len(res.Result) == 0 {
			t.Fatalf("query %s answered %+v", id, res)
		}
	}
}
