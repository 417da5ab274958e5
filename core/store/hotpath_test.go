package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/preseed"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// seededRuns is the history the hot-path test runs over: enough that a
// query reading a table whole, or an index that does not match it, stands
// out from one that reads what it returns.
const seededRuns = 100_000

// seededAgents are the agents of the seeded history besides the one
// holding the runs, 10 for each of as many stranger keys (what GET /agents
// pages through: design.md §The doors).
const seededAgents = 5000

// seededFailed are the last runs of the seeded history, failed a month
// ago: the console's failures of the last hour must not read them.
const seededFailed = 1000

// maxRowsRead is what one hot-path statement may read from runs, threads,
// thread_messages, run_events and agents over the seeded history: a thread
// holds 4 runs and 8 messages, a run 3 events; an agent holds all 100,000
// runs; a page of GET /agents holds 100 agents.
const maxRowsRead = 200

// TestHotPathQueriesUseIndexes drives every hot-path store call a door or
// the broker makes per run (admission and its retry look-ups, the doors'
// reads and tails, the lane's writes, catch-up and recovery reads) over a
// database holding 100,000 runs of history, records each statement the
// store sends (its own text and arguments, through a pgx tracer, so the
// test cannot drift from the queries), and EXPLAINs every one on a database
// that was never analyzed and again after ANALYZE. It fails on a
// sequential scan of runs, threads, thread_messages or run_events, and on
// a statement that reads more than maxRowsRead rows of them (an index that
// does not lead with the predicate's columns).
func TestHotPathQueriesUseIndexes(t *testing.T) {
	ctx := context.Background()
	url := storetest.URLWith(t, fmt.Sprintf("hotpath-v3-%d-%d-%d", seededRuns, seededAgents, seededFailed), func(ctx context.Context, db *sql.DB) error {
		// No autovacuum on these tables: the first EXPLAINs must see a
		// database that was never analyzed, as a fresh deployment is.
		for _, tbl := range []string{"runs", "threads", "thread_messages", "run_events", "answer_requests", "agents", "providers"} {
			if _, err := db.ExecContext(ctx, `ALTER TABLE `+tbl+` SET (autovacuum_enabled = off)`); err != nil {
				return err
			}
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO providers (public_key, fingerprint)
			SELECT lpad(to_hex(k), 64, '0'), lpad(to_hex(k), 16, '0') FROM generate_series(1, $1::int / 10) k`, seededAgents); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO agents (provider_key, name)
			SELECT lpad(to_hex(k), 64, '0'), 's' || i FROM generate_series(1, $1::int / 10) k, generate_series(1, 10) i`, seededAgents); err != nil {
			return err
		}
		if err := preseed.Seed(ctx, db, preseed.Options{Runs: seededRuns, ProviderKey: testProviderKey,
			Fingerprint: testFingerprint, AgentName: testAgent, Prefix: "h"}); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, `UPDATE runs SET status = 'failed', failure_reason = 'seeded',
				completed_at = now() - interval '30 days', last_activity_at = now() - interval '30 days'
			WHERE run_id IN (SELECT 'h-r-' || i FROM generate_series($1::int - $2::int + 1, $1::int) i)`, seededRuns, seededFailed)
		return err
	})
	rec := &recorder{}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = rec
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer traced.Close()
	plain, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var analyzed bool
	if err := plain.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_user_tables
		WHERE relname IN ('runs', 'threads', 'thread_messages', 'run_events', 'agents')
		AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL))`).Scan(&analyzed); err != nil {
		t.Fatal(err)
	}
	if analyzed {
		t.Fatal("the seeded database was analyzed already; the first pass must plan without statistics")
	}

	driveHotPaths(t, store.New(traced, nil), rec)
	stmts := rec.take()
	if len(stmts) < 30 {
		t.Fatalf("recorded only %d hot-path statements", len(stmts))
	}
	explainAll(t, plain, stmts, "before ANALYZE")
	if _, err := plain.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	explainAll(t, plain, stmts, "after ANALYZE")
}

// driveHotPaths makes each hot-path call once, labelling what rec records.
func driveHotPaths(t *testing.T, st *store.Store, rec *recorder) {
	t.Helper()
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	rec.setLabel("leader")
	epoch, err := st.AdvanceEpoch(ctx, "hotpath")
	must("advance epoch", err)

	// Door admission: the agent, a run on a new thread, a run on a thread
	// with history (a retry probe by caller request id, the waiting
	// count), a run with an Idempotency-Key, and retries of both kinds.
	rec.setLabel("door: find agent")
	_, err = st.FindAgent(ctx, testFingerprint, testAgent)
	must("find agent", err)
	newRun := func(label string, nr store.NewRun) store.Run {
		t.Helper()
		rec.setLabel(label)
		if nr.RunID == "" {
			nr.RunID = run.NewRunID()
		}
		if nr.ThreadID == "" {
			nr.ThreadID, nr.CreateThread = run.NewThreadID(), &store.NewThread{}
		}
		nr.ProviderKey, nr.AgentName = testProviderKey, testAgent
		nr.RunInput, _ = json.Marshal(map[string]any{"threadId": nr.ThreadID, "runId": nr.RunID})
		nr.Messages = []store.Message{{MessageID: run.NewMessageID(), Message: json.RawMessage(`{"role":"user","content":"hi"}`)}}
		r, _, err := st.CreateRun(ctx, nr)
		must(label, err)
		return r
	}
	fresh := newRun("door: create run on a new thread", store.NewRun{})
	onHistory := newRun("door: create run on a thread with history", store.NewRun{
		ThreadID: "h-t-777", CallerRequestID: "caller-req-1", MaxQueued: 8})
	newRun("door: create run with an idempotency key", store.NewRun{IdempotencyKey: "idem-1"})
	newRun("door: first turn naming a thread id it takes for unknown", store.NewRun{IdempotencyKey: "idem-2",
		UnlessThread: "callers-own-thread-1"})
	newRun("door: retried run by idempotency key", store.NewRun{IdempotencyKey: "h-k-5000"})
	newRun("door: retried run by caller request id", store.NewRun{ThreadID: "h-t-1250", CallerRequestID: "h-c-5000"})
	rec.setLabel("door: find retried run")
	_, ok, err := st.FindRetriedRun(ctx, store.NewRun{ThreadID: "h-t-2500", ProviderKey: testProviderKey,
		AgentName: testAgent, CallerRequestID: "h-c-10000"})
	must("find retried", err)
	if !ok {
		t.Fatal("the seeded run h-r-10000 was not found by its caller request id")
	}

	// The lane: offering, the claim with its first events, more events,
	// a pause; the door's reopen of it; then the end with the agent's reply.
	rec.setLabel("broker: offering")
	_, err = st.Transition(ctx, store.Move{RunID: onHistory.RunID, To: run.Offering, Writer: run.ByBroker,
		Epoch: epoch, Lazy: true, Brief: true})
	must("offering", err)
	pseq := func(n int64) *int64 { return &n }
	rec.setLabel("broker: claim")
	_, _, err = st.Conclude(ctx, store.Conclusion{Move: store.Move{RunID: onHistory.RunID, To: run.Running,
		Writer: run.ByBroker, Epoch: epoch}, Claim: true,
		ProviderEvents: []store.NewEvent{{Event: json.RawMessage(`{"type":"RUN_STARTED"}`), ProviderSeq: pseq(1)}}})
	must("claim", err)
	rec.setLabel("broker: append events")
	_, err = st.AppendProviderEvents(ctx, epoch, onHistory.RunID, []store.NewEvent{
		{Event: json.RawMessage(`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`), ProviderSeq: pseq(2)},
		{Event: json.RawMessage(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi"}`), ProviderSeq: pseq(3)}})
	must("append", err)
	rec.setLabel("broker: pause")
	_, _, err = st.Conclude(ctx, store.Conclusion{Move: store.Move{RunID: onHistory.RunID, To: run.InputRequired,
		Writer: run.ByBroker, Epoch: epoch, Interrupt: json.RawMessage(`{"reason":"ask"}`)},
		ProviderEvents: []store.NewEvent{{Event: json.RawMessage(`{"type":"RUN_FINISHED"}`), ProviderSeq: pseq(4)}}})
	must("pause", err)
	rec.setLabel("door: newest paused run")
	_, _, err = st.NewestRunInStatus(ctx, onHistory.ThreadID, run.InputRequired)
	must("newest paused", err)
	rec.setLabel("door: paused runs an answer is weighed against")
	_, err = st.ThreadRunsInStatus(ctx, onHistory.ThreadID, 8, run.InputRequired)
	must("paused runs", err)
	rec.setLabel("door: reopen")
	_, err = st.ReopenRun(ctx, store.Reopen{RunID: onHistory.RunID, CallerRequestID: "answer-1",
		Messages: []store.Message{{MessageID: run.NewMessageID(), Message: json.RawMessage(`{"role":"user","content":"yes"}`)}}})
	must("reopen", err)
	newRun("door: retried answer", store.NewRun{ThreadID: onHistory.ThreadID, CallerRequestID: "answer-1"})
	rec.setLabel("broker: offering again")
	_, err = st.Transition(ctx, store.Move{RunID: onHistory.RunID, To: run.Offering, Writer: run.ByBroker,
		Epoch: epoch, Lazy: true, Brief: true})
	must("offering again", err)
	rec.setLabel("broker: claim and complete")
	_, _, err = st.Conclude(ctx, store.Conclusion{Move: store.Move{RunID: onHistory.RunID, To: run.Completed,
		Writer: run.ByBroker, Epoch: epoch}, Claim: true,
		ProviderEvents: []store.NewEvent{{Event: json.RawMessage(`{"type":"RUN_STARTED"}`), ProviderSeq: pseq(1)}},
		AgentMessages:  []store.Message{{MessageID: run.NewMessageID(), Message: json.RawMessage(`{"role":"assistant","content":"ok"}`)}}})
	must("complete", err)
	rec.setLabel("broker: refused move")
	if _, err := st.Transition(ctx, store.Move{RunID: onHistory.RunID, To: run.Offering, Writer: run.ByBroker,
		Epoch: epoch, Lazy: true, Brief: true}); err == nil {
		t.Fatal("a completed run was moved to offering")
	}

	// A held run the new leader adopts, and a cancel request.
	rec.setLabel("broker: offering (held)")
	_, err = st.Transition(ctx, store.Move{RunID: fresh.RunID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch})
	must("offering", err)
	rec.setLabel("broker: claim (held)")
	_, err = st.Transition(ctx, store.Move{RunID: fresh.RunID, To: run.Running, Writer: run.ByBroker, Epoch: epoch})
	must("claim", err)
	rec.setLabel("broker: adopt")
	_, err = st.Adopt(ctx, epoch, fresh.RunID)
	must("adopt", err)
	rec.setLabel("door: cancel")
	_, err = st.RequestCancel(ctx, fresh.RunID, "")
	must("cancel", err)

	// The doors' reads and tails, on a run and thread with history.
	reads := []struct {
		label string
		call  func() error
	}{
		{"door: thread", func() error { _, err := st.GetThread(ctx, "h-t-900"); return err }},
		{"door: run", func() error { _, err := st.GetRun(ctx, "h-r-3600"); return err }},
		{"door: thread messages", func() error { _, err := st.ThreadMessages(ctx, "h-t-900", 0); return err }},
		{"door: a thread's opening messages", func() error {
			_, _, err := st.ThreadOpening(ctx, "h-t-900", 1000, 2<<20)
			return err
		}},
		{"door: thread snapshot page", func() error {
			_, err := st.ThreadMessagePage(ctx, "h-t-900", 0, 1000, 4<<20)
			return err
		}},
		{"door: thread snapshot page (an older one)", func() error {
			_, err := st.ThreadMessagePage(ctx, "h-t-900", 1<<40, 2, 4<<20)
			return err
		}},
		{"broker: thread messages (limited)", func() error { _, err := st.ThreadMessagesWithin(ctx, "h-t-900", 10, 1<<20); return err }},
		{"broker: thread messages (bounded)", func() error { _, err := st.ThreadMessagesWithin(ctx, "h-t-900", 0, 1<<20); return err }},
		{"door: newest active run", func() error {
			_, _, err := st.NewestRunInStatus(ctx, "h-t-900", run.Queued, run.Offering, run.Running, run.Cancelling)
			return err
		}},
		{"a2a: task history", func() error { _, err := st.RunMessages(ctx, "h-r-3600"); return err }},
		{"a2a: task record", func() error {
			_, err := st.ReadRecord(ctx, store.RecordRead{RunID: "h-r-3600", Run: true, UpTo: -1, Limit: 500})
			return err
		}},
		{"a2a: task record (events up to a seq)", func() error {
			_, err := st.ReadRecord(ctx, store.RecordRead{RunID: "h-r-3600", UpTo: 2, Limit: 500})
			return err
		}},
		{"a2a: task record's next page", func() error { _, err := st.EventsBetween(ctx, "h-r-3600", 1, -1, 500); return err }},
		{"a2a: context's tasks", func() error {
			_, _, err := st.ContextTasks(ctx, store.TaskPage{ThreadID: "h-t-900", ProviderKey: testProviderKey, AgentName: testAgent, Limit: 51})
			return err
		}},
		{"a2a: context's tasks (a later page, filtered)", func() error {
			_, _, err := st.ContextTasks(ctx, store.TaskPage{ThreadID: "h-t-900", ProviderKey: testProviderKey, AgentName: testAgent,
				Filter: true, Statuses: []string{"completed"}, ActiveAfter: time.Unix(0, 0), HasAfter: true, AfterActive: time.Now(), AfterRunID: "run_x", Limit: 51})
			return err
		}},
		{"door: tail", func() error { _, _, err := st.EventsAndRun(ctx, "h-r-3600", 0, 500); return err }},
		{"door: events after", func() error { _, err := st.EventsAfter(ctx, "h-r-3600", 1, 1000); return err }},
		{"door: agents page", func() error {
			p, err := st.AgentsPage(ctx, store.AgentPageQuery{HiddenAfter: 168 * time.Hour, Limit: 100, MaxBytes: 2 << 20})
			if err == nil && (len(p.Agents) != 100 || !p.More) {
				err = fmt.Errorf("a page of %d agents, more=%v; want 100 and more", len(p.Agents), p.More)
			}
			return err
		}},
		{"door: agents page (a later one)", func() error {
			_, err := st.AgentsPage(ctx, store.AgentPageQuery{HiddenAfter: 168 * time.Hour,
				AfterKey: fmt.Sprintf("%064x", seededAgents/20), AfterName: "s5", Limit: 100, MaxBytes: 2 << 20})
			return err
		}},
		{"kyok: run", func() error { _, err := st.GetKyokRun(ctx, "h-r-3600"); return err }},
		{"broker: catch-up", func() error { _, err := st.QueuedRuns(ctx, store.QueueCursor{}, 100); return err }},
		{"broker: catch-up (next page)", func() error {
			_, err := st.QueuedRuns(ctx, fresh.QueueCursor(), 100)
			return err
		}},
		{"broker: recovery (queued)", func() error { _, err := st.RunsInStatus(ctx, string(run.Queued)); return err }},
		{"broker: recovery (held)", func() error {
			_, err := st.RunsInStatus(ctx, string(run.Offering), string(run.Running), string(run.Cancelling))
			return err
		}},
		{"broker: recovery (cancels)", func() error { _, err := st.CancelRequestedActive(ctx); return err }},
		{"broker: recovery (events)", func() error { _, err := st.EventsAfter(ctx, fresh.RunID, 0, 1<<20); return err }},
		// The operator console reads this every 1.5 s (design.md §The
		// operator console): its cost must not grow with the history.
		{"console: runs overview", func() error {
			ov, err := st.RunsOverview(ctx, time.Hour)
			if err == nil && (len(ov.Failures) != 0 || ov.OldestQueued == nil || ov.LongestRunning == nil) {
				err = fmt.Errorf("overview %+v: want no failure in the hour (the seeded ones are a month old), a queued and a running run", ov)
			}
			return err
		}},
	}
	for _, r := range reads {
		rec.setLabel(r.label)
		must(r.label, r.call())
	}
}

// explainAll EXPLAINs every recorded statement with its own arguments: a
// read or an update under ANALYZE in a transaction rolled back (so the
// rows it read are counted), an insert without (it would collide with the
// row its call wrote).
func explainAll(t *testing.T, pool *pgxpool.Pool, stmts []recorded, pass string) {
	t.Helper()
	ctx := context.Background()
	for _, s := range stmts {
		analyze := !strings.HasPrefix(strings.ToUpper(strings.TrimSpace(s.sql)), "INSERT")
		opts := "FORMAT JSON"
		if analyze {
			opts = "ANALYZE, FORMAT JSON"
		}
		var out []byte
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "EXPLAIN ("+opts+") "+s.sql, s.args...).Scan(&out); err != nil {
				return err
			}
			return errRollback
		})
		if err != errRollback {
			t.Errorf("%s: %s: EXPLAIN: %v\n%s", pass, s.label, err, s.sql)
			continue
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("%s: %s: plan: %v", pass, s.label, err)
		}
		var problems []string
		read := 0.0
		plans[0].Plan.walk(func(n planNode) {
			if !hotTables[n.Relation] {
				return
			}
			if n.NodeType == "Seq Scan" {
				problems = append(problems, "a sequential scan of "+n.Relation)
			}
			read += (n.ActualRows + n.RemovedByFilter + n.RemovedByRecheck) * max(n.ActualLoops, 1)
		})
		if analyze && read > maxRowsRead {
			problems = append(problems, fmt.Sprintf("%.0f rows read", read))
		}
		if len(problems) > 0 {
			t.Errorf("%s: %s: %s\n%s\nplan: %s", pass, s.label, strings.Join(problems, ", "),
				strings.TrimSpace(s.sql), out)
		}
	}
}

var errRollback = fmt.Errorf("rolled back on purpose")

var hotTables = map[string]bool{"runs": true, "threads": true, "thread_messages": true, "run_events": true, "agents": true}

type planNode struct {
	NodeType         string     `json:"Node Type"`
	Relation         string     `json:"Relation Name"`
	ActualRows       float64    `json:"Actual Rows"`
	ActualLoops      float64    `json:"Actual Loops"`
	RemovedByFilter  float64    `json:"Rows Removed by Filter"`
	RemovedByRecheck float64    `json:"Rows Removed by Index Recheck"`
	Plans            []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// recorder is a pgx tracer keeping every statement that touches the hot
// tables, single or batched, with its arguments and the call it came from.
type recorder struct {
	mu    sync.Mutex
	label string
	stmts []recorded
}

type recorded struct {
	label, sql string
	args       []any
}

var hotStatement = regexp.MustCompile(`(?is)^\s*(SELECT|WITH|UPDATE|INSERT|DELETE)\b.*\b(runs|threads|thread_messages|run_events|agents)\b`)

func (r *recorder) setLabel(l string) { r.mu.Lock(); r.label = l; r.mu.Unlock() }

func (r *recorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.stmts
	r.stmts = nil
	return out
}

func (r *recorder) add(sql string, args []any) {
	if !hotStatement.MatchString(sql) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, recorded{label: r.label, sql: sql, args: args})
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL, d.Args)
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *recorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add(d.SQL, d.Args)
}

func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
