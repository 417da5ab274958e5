package retention_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/funduq/funduq-go/broker-node/retention"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/internal/leaktest"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func TestMain(m *testing.M) {
	leaktest.MainWithPools(m)
}

const providerKey = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"

// Seed creates n runs on new threads, settled (completed) at settledAt.
func Seed(t *testing.T, st *store.Store, n int, settledAt time.Time) []string {
	t.Helper()
	ctx := context.Background()
	storetest.Agent(t, st, providerKey, "echo")
	var ids []string
	for range n {
		r, _, err := st.CreateRun(ctx, store.NewRun{RunID: run.NewRunID(), ThreadID: run.NewThreadID(), ProviderKey: providerKey,
			AgentName: "echo", RunInput: []byte(`{}`), CreateThread: &store.NewThread{}})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`UPDATE runs SET status = 'completed', completed_at = $2, last_activity_at = $2 WHERE run_id = $1`,
			`INSERT INTO run_events (run_id, seq, event) VALUES ($1, 1, '{"type":"RUN_FINISHED"}')`,
		} {
			args := []any{r.RunID}
			if strings.Contains(q, "$2") {
				args = append(args, settledAt)
			}
			if _, err := st.Pool().Exec(ctx, q, args...); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Pool().Exec(ctx, `UPDATE threads SET last_activity_at = $2 WHERE thread_id = $1`, r.ThreadID, settledAt); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.RunID)
	}
	return ids
}

// A pass deletes in bounded batches until none is left, counting each
// batch in the metrics and writing one log line per batch.
func TestPass(t *testing.T) {
	st := storetest.Store(t)
	Seed(t, st, 5, time.Now().Add(-31*24*time.Hour))
	keep := Seed(t, st, 1, time.Now().Add(-time.Hour))
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	c := &retention.Cleaner{Store: st, Retention: 720 * time.Hour, Batch: 2, Metrics: retention.NewMetrics(reg),
		Log: slog.New(slog.NewJSONHandler(&logs, nil))}
	p, err := c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p != (store.Pruned{Runs: 5, Events: 5, Threads: 5}) {
		t.Fatalf("pass deleted %+v", p)
	}
	if got := value(c.Metrics.Batches); got != 3 {
		t.Errorf("batches metric %v, want 3 (2+2+1)", got)
	}
	for what, want := range map[string]float64{"runs": 5, "events": 5, "threads": 5, "messages": 0} {
		if got := value(c.Metrics.Deleted.WithLabelValues(what)); got != want {
			t.Errorf("deleted{%s} %v, want %v", what, got, want)
		}
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "retention deleted settled runs" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 3 || lines[0]["runs"] != float64(2) || lines[2]["runs"] != float64(1) || lines[0]["retention"] != "720h0m0s" {
		t.Errorf("log lines %v", lines)
	}
	var n int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM runs WHERE run_id = $1`, keep[0]).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the recent run: %d %v", n, err)
	}
	// Start runs a pass at once and stops when told.
	Seed(t, st, 1, time.Now().Add(-31*24*time.Hour))
	c.Interval = time.Hour
	done := make(chan struct{})
	stop := c.Start(context.Background())
	go func() {
		defer close(done)
		for value(c.Metrics.Batches) < 4 {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Error("Start ran no pass")
	}
	stop()
}

// A pass stopped because leadership ended (a handover, a shutdown) while a
// batch is in flight is no failure: the batch rolls back and the next
// leader's pass deletes the rest. It must not count in
// funduq_retention_errors_total nor log a WARN, or every handover during a
// pass would page whoever alerts on retention failing.
func TestPassStoppedMidBatchIsNoFailure(t *testing.T) {
	st := storetest.Store(t)
	ids := Seed(t, st, 3, time.Now().Add(-31*24*time.Hour))
	ctx := context.Background()
	// The batch's deletes wait behind a lock the test holds.
	conn, err := st.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE run_events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	c := &retention.Cleaner{Store: st, Retention: 720 * time.Hour, Batch: 10, Metrics: retention.NewMetrics(nil),
		Log: slog.New(slog.NewJSONHandler(logs, nil))}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Pass(pctx)
		done <- err
	}()
	for waiting := false; !waiting; {
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM run_events%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel() // leadership ends
	if err := <-done; err == nil {
		t.Fatal("the stopped pass reported success")
	}
	if got := value(c.Metrics.Errors); got != 0 {
		t.Errorf("errors metric %v after a pass stopped by its leader's end, want 0", got)
	}
	if strings.Contains(logs.String(), `"level":"WARN"`) || strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("logged as a failure: %s", logs.String())
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE run_id = ANY($1)`, ids).Scan(&n); err != nil || n != 3 {
		t.Fatalf("runs left after the stopped pass: %d %v, want all 3 (its batch rolled back)", n, err)
	}
}

// With AgentRetention, a pass also deletes the agents and providers
// records nobody has served for that long and no conversation names, in
// batches of keys, and counts them; runs are kept when Retention is 0.
func TestPassDeletesUnservedRecords(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	kept := Seed(t, st, 1, time.Now().Add(-31*24*time.Hour)) // echo of providerKey, with a conversation
	strangers := []string{
		"b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1",
		"c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1",
		"d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1",
	}
	for _, k := range append(strangers, providerKey) {
		if k != providerKey {
			if _, err := st.Pool().Exec(ctx, `INSERT INTO providers (public_key, fingerprint) VALUES ($1, $2)`, k, k[:16]); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"x", "y"} {
				if _, err := st.Pool().Exec(ctx, `INSERT INTO agents (provider_key, name) VALUES ($1, $2)`, k, name); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := st.Pool().Exec(ctx, `UPDATE agents SET last_seen_at = now() - interval '8 days', unserved_since = now() - interval '8 days'
			WHERE provider_key = $1`, k); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Pool().Exec(ctx, `UPDATE providers SET first_seen_at = now() - interval '8 days', updated_at = now() - interval '8 days'
			WHERE public_key = $1`, k); err != nil {
			t.Fatal(err)
		}
	}
	c := &retention.Cleaner{Store: st, AgentRetention: 168 * time.Hour, Batch: 2, Metrics: retention.NewMetrics(nil)}
	p, err := c.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p != (store.Pruned{Agents: 6, Providers: 3}) {
		t.Fatalf("pass deleted %+v, want 6 agents and 3 providers", p)
	}
	if a, pr := value(c.Metrics.Deleted.WithLabelValues("agents")), value(c.Metrics.Deleted.WithLabelValues("providers")); a != 6 || pr != 3 {
		t.Errorf("deleted{agents} %v, {providers} %v", a, pr)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM runs WHERE run_id = $1) + (SELECT count(*) FROM agents)`, kept[0]).Scan(&n); err != nil || n != 2 {
		t.Fatalf("the run and the agent it names: %d rows %v, want both", n, err)
	}
}
