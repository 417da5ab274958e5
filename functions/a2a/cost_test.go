package a2a_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

// costMeter is a pgx tracer on a door's own pool: what the door asks of
// PostgreSQL, as PostgreSQL sees it — the transactions it commits (an
// autocommit statement, a batch in its implicit transaction, a COMMIT;
// the agent's look-up, cached a second per door process, not counted),
// the rows of run_events its statements return, and the largest number
// one statement returned.
type costMeter struct {
	mu             sync.Mutex
	commits        int
	eventRows      int
	maxEventRows   int
	eventStatement int
}

type costOp struct {
	agent    bool // the agent's look-up (FindAgentCached: once a second per agent)
	idle     bool // no transaction open when the operation began
	commit   bool // it holds a COMMIT
	rollback bool
}

type costKey struct{}

func (m *costMeter) begin(ctx context.Context, conn *pgx.Conn, sqls ...string) context.Context {
	op := &costOp{idle: conn.PgConn().TxStatus() == 'I'}
	op.agent = len(sqls) == 1 && strings.Contains(sqls[0], "FROM agents a JOIN providers")
	for _, s := range sqls {
		m.note(op, s)
	}
	return context.WithValue(ctx, costKey{}, op)
}

func (m *costMeter) note(op *costOp, sql string) {
	switch strings.ToUpper(strings.TrimSpace(sql)) {
	case "COMMIT":
		op.commit = true
	case "ROLLBACK":
		op.rollback = true
	}
}

func (m *costMeter) end(ctx context.Context, conn *pgx.Conn, err error) {
	op, _ := ctx.Value(costKey{}).(*costOp)
	if op == nil || err != nil || op.rollback || conn.PgConn().TxStatus() != 'I' {
		return
	}
	if (op.idle || op.commit) && !op.agent {
		m.mu.Lock()
		m.commits++
		m.mu.Unlock()
	}
}

func (m *costMeter) rows(sql string, tag pgconn.CommandTag) {
	if !strings.Contains(sql, "FROM run_events") || !tag.Select() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := int(tag.RowsAffected())
	m.eventRows += n
	m.eventStatement++
	m.maxEventRows = max(m.maxEventRows, n)
}

func (m *costMeter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	ctx = m.begin(ctx, conn, d.SQL)
	return context.WithValue(ctx, costSQLKey{}, d.SQL)
}

type costSQLKey struct{}

func (m *costMeter) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err == nil {
		sql, _ := ctx.Value(costSQLKey{}).(string)
		m.rows(sql, d.CommandTag)
	}
	m.end(ctx, conn, d.Err)
}

func (m *costMeter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	return m.begin(ctx, conn, sqls...)
}

func (m *costMeter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if d.Err == nil {
		m.rows(d.SQL, d.CommandTag)
	}
}

func (m *costMeter) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	m.end(ctx, conn, d.Err)
}

func (m *costMeter) read() (commits, eventRows, statements, maxRows int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.commits, m.eventRows, m.eventStatement, m.maxEventRows
}

func (m *costMeter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.commits, m.eventRows, m.eventStatement, m.maxEventRows = 0, 0, 0, 0
}

// meteredDoor serves an A2A door whose store is metered; withFeed false
// leaves it without the live feed, so every event it relays is one it
// read from PostgreSQL (and counted).
func meteredDoor(t *testing.T, h *nodetest.Harness, withFeed bool) (*httptest.Server, *costMeter) {
	t.Helper()
	deps := doorDeps(t, h)
	m := &costMeter{}
	cfg, err := pgxpool.ParseConfig(h.Cfg.Storage.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.Tracer = m
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool, nil)
	o := a2a.Options{Store: st, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret,
		Tail: door.TailOptions{Heartbeat: 15 * time.Second, LiveBlock: 500 * time.Millisecond,
			PollInterval: 20 * time.Millisecond}}
	if withFeed {
		// A tail fed by the feed reads PostgreSQL only when the feed
		// fails or skips, never on a clock within the test's guard. A
		// blocking send waits for the end marker up to the poll interval
		// before it reads the record: under load the marker can trail the
		// terminal event by more than 20ms, and the record was then read
		// before the end and again after it (a count off by one in CI).
		o.Feed, o.Tail.DBCheck, o.Tail.PollInterval = deps.Feed, time.Minute, guard
	}
	hd, err := a2a.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hd)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		pool.Close()
		deps.Close()
	})
	return srv, m
}

// A blocking send reads each of its run's stored events once (issue
// #19): the tail's own reads give the answer its artifacts, and the
// settled record is read without them. Without the live feed every event
// the tail relays is read from PostgreSQL, so the count is exact.
func TestBlockingSendReadsEachEventOnce(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, m := meteredDoor(t, h, false)
	c := newClient(t, srv, p.Key, "echo", "")
	done := make(chan string, 1)
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
		done <- f.RunID
	}()
	task := c.send(c.message("m-1", "hi", nil), nil)
	id := <-done
	if task["id"] != id || stateOf(task) != "completed" {
		t.Fatalf("task %v", task)
	}
	if arts, _ := task["artifacts"].([]any); len(arts) != 1 || !strings.Contains(fmt.Sprint(arts[0]), "hello") {
		t.Errorf("artifacts %v", task["artifacts"])
	}
	if hist, _ := task["history"].([]any); len(hist) != 2 {
		t.Errorf("history %v", task["history"])
	}
	stored := len(h.Events(id))
	if _, rows, _, _ := m.read(); rows != stored {
		t.Errorf("the door read %d rows of run_events for a run of %d events: want each once", rows, stored)
	}
}

// A stream (message/stream, then a resubscribe from a Last-Event-ID) reads
// each stored event once: the opening snapshot those up to where the tail
// starts, the tail the rest, and the final status comes from what they
// read — not the whole run three times (issue #19).
func TestStreamReadsEachEventOnce(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, m := meteredDoor(t, h, false)
	c := newClient(t, srv, p.Key, "echo", "")

	s := c.stream(c.body("message/stream", map[string]any{"message": c.message("s-1", "hi", nil)}), nil)
	if first, ok := s.next(); !ok || first.Resp.Result["kind"] != "task" {
		t.Fatalf("first item %+v", first)
	}
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"RUN_ERROR","message":"it broke","code":"boom"}`)
	p.Finish(f.RunID)
	items := s.rest()
	last := items[len(items)-1].Resp.Result
	if stateOf(last) != "failed" || last["final"] != true {
		t.Fatalf("final %v", last)
	}
	h.WaitStatus(f.RunID, run.Failed)
	stored := len(h.Events(f.RunID))
	if _, rows, _, _ := m.read(); rows != stored {
		t.Errorf("message/stream read %d rows of run_events for a run of %d events: want each once", rows, stored)
	}

	// A resubscribe from the middle of a running run.
	runID := startRunning(t, h, p, c, 3)
	m.reset()
	sub := c.stream(c.body("tasks/resubscribe", map[string]any{"id": runID}), map[string]string{a2a.LastEventIDHeader: "2"})
	if first, ok := sub.next(); !ok || first.Resp.Result["kind"] != "task" {
		t.Fatalf("resubscribe's first item %+v", first)
	}
	th := h.Run(runID).ThreadID
	p.Event(runID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"lo"}`)
	p.Event(runID, runFinished(th, runID))
	p.Finish(runID)
	rest := sub.rest()
	if got := strings.Join(kinds(rest), " "); got != "artifact-update artifact-update status-update:completed" {
		t.Fatalf("resubscribe from 2: %s", got)
	}
	h.WaitStatus(runID, run.Completed)
	if _, rows, _, _ := m.read(); rows != len(h.Events(runID)) {
		t.Errorf("the resubscribe read %d rows of run_events for a run of %d events: want each once", rows, len(h.Events(runID)))
	}
}

// storedEvents counts a run's stored events.
func storedEvents(t *testing.T, h *nodetest.Harness, runID string) int {
	t.Helper()
	var n int
	if err := h.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM run_events WHERE run_id = $1`, runID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// startRunning has p claim a new run through the door (a non-blocking
// send) and store n events of it: RUN_STARTED, TEXT_MESSAGE_START and
// text contents.
func startRunning(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, c *client, n int) string {
	t.Helper()
	task := c.send(c.message(fmt.Sprintf("r-%d", time.Now().UnixNano()), "go on", nil),
		map[string]any{"configuration": map[string]any{"blocking": false}})
	id, _ := task["id"].(string)
	f := p.Offer()
	if f.RunID != id {
		t.Fatalf("offered %s, sent %s", f.RunID, id)
	}
	p.Accept(id)
	evs := []string{runStarted(*f.ThreadID, id), `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`}
	for i := len(evs); i < n; i++ {
		evs = append(evs, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hel"}`)
	}
	for _, ev := range evs[:n] {
		p.Event(id, ev)
	}
	h.Eventually("the run's events stored", func() bool { return len(h.Events(id)) == n })
	return id
}

// A task's record is read in bounded keyset pages, each event once, however
// long the run: tasks/get on a run of 1,234 events reads no statement of
// more than a page (500 events) and 1,234 event rows in all, and answers
// every delta.
func TestTaskRecordIsReadInPages(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, m := meteredDoor(t, h, true)
	c := newClient(t, srv, p.Key, "echo", "")
	const deltas = 1230
	task := c.send(c.message("long-1", "go on", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id, _ := task["id"].(string)
	f := p.Offer()
	p.Accept(id)
	p.Event(id, runStarted(*f.ThreadID, id))
	p.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	for range deltas {
		p.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"x"}`)
	}
	p.Event(id, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(id, runFinished(*f.ThreadID, id))
	p.Finish(id)
	h.WaitStatus(id, run.Completed)
	stored := storedEvents(t, h, id)
	if stored != deltas+4 {
		t.Fatalf("%d events stored, want %d", stored, deltas+4)
	}
	m.reset()
	got := c.ok("tasks/get", map[string]any{"id": id})
	arts, _ := got["artifacts"].([]any)
	if len(arts) != 1 || strings.Count(fmt.Sprint(arts[0]), "x") < deltas {
		t.Fatalf("artifacts of %d deltas: %.200v", deltas, arts)
	}
	_, rows, statements, maxRows := m.read()
	if rows != stored || maxRows > 500 || statements < 3 {
		t.Errorf("tasks/get read %d event rows in %d statements (at most %d in one) for %d events: want each once, in pages of at most 500",
			rows, statements, maxRows, stored)
	}
}

// The transactions a blocking message/send commits at the door for one
// run this request wrote: the insert (thread, run, message, NOTIFY) alone.
// Every event came from the live feed, stored before it was published
// (D9), and the broker's end marker, published after the end's commit,
// carries the recorded outcome the answer needs (the status, the failure
// reason, the pause payload, last_activity_at, the agent's messages with
// the ids the broker minted), so the settled record is not read:
// docs/performance.md §Round trips per run.
func TestBlockingSendTransactions(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, m := meteredDoor(t, h, true)
	c := newClient(t, srv, p.Key, "echo", "")
	// The agent look-up is cached per door; the first send fills it.
	warm := make(chan struct{})
	go func() {
		defer close(warm)
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
	}()
	c.send(c.message("w-1", "hi", nil), nil)
	<-warm
	for i := range 3 {
		m.reset()
		done := make(chan string, 1)
		go func() {
			f := p.Offer()
			p.Accept(f.RunID)
			p.Complete(f.RunID, *f.ThreadID)
			done <- f.RunID
		}()
		task := c.send(c.message(fmt.Sprintf("m-%d", i), "hi", nil), nil)
		<-done
		if stateOf(task) != "completed" {
			t.Fatalf("task %v", task)
		}
		commits, rows, _, _ := m.read()
		if commits != 1 || rows != 0 {
			t.Errorf("send %d: the door committed %d transactions and read %d event rows; want 1 (the insert; the end marker carries the outcome) and 0 (the events came from the live feed)", i, commits, rows)
		}
	}
}
