package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// oldSettledThread makes a thread whose only run completed 40 days ago:
// retention at a 30-day cutoff deletes both.
func oldSettledThread(t *testing.T, st *store.Store) store.Run {
	t.Helper()
	ctx := context.Background()
	r := newRun(t, st)
	forceStatus(t, st, r.RunID, run.Completed)
	old := time.Now().Add(-40 * 24 * time.Hour)
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET completed_at = $2, last_activity_at = $2 WHERE run_id = $1`,
		r.RunID, old); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE threads SET last_activity_at = $2 WHERE thread_id = $1`,
		r.ThreadID, old); err != nil {
		t.Fatal(err)
	}
	return r
}

// A door opening a child thread on a parent (an A2A reference to its
// task) while retention deletes that parent, the door's insert holding the
// parent's row when the prune reaches it: the prune keeps the parent (it
// has a child now) and deletes the rest of its batch, rather than failing
// the whole batch on the child's foreign key. Here the door's transaction
// is held open by hand until the prune waits on it (a barrier on
// pg_stat_activity), so the window is hit every time.
func TestPruneWhileAChildThreadIsBeingOpenedOnItsParent(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	parent := oldSettledThread(t, st)
	other := oldSettledThread(t, st) // an unrelated old thread in the same batch

	// The door's admission of a run on a new child thread, not committed yet.
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	child := run.NewThreadID()
	if _, err := tx.Exec(ctx, `INSERT INTO threads (thread_id, provider_key, agent_name, parent_thread_id) VALUES ($1, $2, $3, $4)`,
		child, testProviderKey, testAgent, parent.ThreadID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO runs (run_id, thread_id, provider_key, agent_name, status, run_input) VALUES ($1, $2, $3, $4, 'queued', '{}')`,
		run.NewRunID(), child, testProviderKey, testAgent); err != nil {
		t.Fatal(err)
	}

	type result struct {
		p   store.Pruned
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := st.PruneBatch(ctx, time.Now().Add(-30*24*time.Hour), 10)
		done <- result{p, err}
	}()
	// Barrier: the prune is waiting for the door's lock on the parent row.
	for {
		var waiting bool
		if err := st.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM threads%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the prune finished before it met the door's lock: %+v %v", r.p, r.err)
		default:
		}
		time.Sleep(5 * time.Millisecond) // polling a barrier, not timing an assertion
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("the prune failed as a door opened a child thread on the parent it deleted: %v", r.err)
	}
	if want := (store.Pruned{Runs: 2, Messages: r.p.Messages, Events: r.p.Events, Threads: 1}); r.p != want {
		t.Fatalf("pruned %+v, want both old runs and only the thread with no child (%+v)", r.p, want)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM threads WHERE thread_id = ANY($1)`,
		[]string{parent.ThreadID, child, other.ThreadID}).Scan(&n); err != nil || n != 2 {
		t.Fatalf("threads left %d (%v), want the parent and its child", n, err)
	}
}

// The same race between the door's real admission (store.Admit opening a
// child thread on the parent) and PruneBatch, at seeded random moments:
// whichever wins, the prune never fails, and the door either has its run
// on a child of a kept parent or is told the parent is gone
// (store.ErrThreadGone, which the doors answer as for an unknown task).
func TestPruneRacingAChildThreadOnItsParent(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	cutoff := time.Now().Add(-30 * 24 * time.Hour)
	var admitted, gone int
	for i := 0; i < 40; i++ {
		parent := oldSettledThread(t, st)
		delays := [2]time.Duration{time.Duration(rng.IntN(2000)) * time.Microsecond, time.Duration(rng.IntN(2000)) * time.Microsecond}
		var wg sync.WaitGroup
		var pruneErr, admitErr error
		child := run.NewThreadID()
		wg.Add(2)
		go func() {
			defer wg.Done()
			time.Sleep(delays[0])
			_, pruneErr = st.PruneBatch(ctx, cutoff, 10)
		}()
		go func() {
			defer wg.Done()
			time.Sleep(delays[1])
			_, admitErr = st.Admit(ctx, store.NewRun{RunID: run.NewRunID(), ThreadID: child, ProviderKey: testProviderKey,
				AgentName: testAgent, RunInput: []byte(`{}`), CreateThread: &store.NewThread{ParentThreadID: parent.ThreadID}})
		}()
		wg.Wait()
		if pruneErr != nil {
			t.Fatalf("seed %d round %d: the prune failed: %v", seed, i, pruneErr)
		}
		var parentKept bool
		if err := st.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM threads WHERE thread_id = $1)`, parent.ThreadID).Scan(&parentKept); err != nil {
			t.Fatal(err)
		}
		switch {
		case admitErr == nil && parentKept:
			admitted++
		case errors.Is(admitErr, store.ErrThreadGone) && !parentKept:
			gone++
		default:
			t.Fatalf("seed %d round %d: admit %v, parent kept %v", seed, i, admitErr, parentKept)
		}
	}
	t.Logf("admitted %d, told gone %d", admitted, gone)
}

// The dry run's count is the prune's: over a seeded random forest of
// threads (parents and children up to thirty deep, threads with old settled,
// recent, running or paused runs, and threads left with no run at all),
// PrunePreview equals the sum of PruneBatch's batches, of random sizes,
// and nothing is left to preview after them.
func TestPrunePreviewIsWhatThePruneDeletes(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
	old, recent := time.Now().Add(-40*24*time.Hour), time.Now().Add(-time.Hour)
	type thread struct {
		id    string
		depth int
	}
	var threads []thread
	for i := 0; i < 80; i++ {
		th := thread{id: run.NewThreadID()}
		var parent any
		if len(threads) > 0 && rng.IntN(3) > 0 {
			p := threads[rng.IntN(len(threads))]
			if p.depth < 30 {
				parent, th.depth = p.id, p.depth+1
			}
		}
		activity := old
		type seeded struct {
			status string
			at     time.Time
		}
		var runs []seeded
		for n := rng.IntN(4); n > 0; n-- {
			r := seeded{status: []string{"completed", "cancelled", "completed", "running", "input-required", "completed"}[rng.IntN(6)], at: old}
			if rng.IntN(6) == 0 {
				r.at = recent
			}
			if r.at.After(activity) {
				activity = r.at
			}
			runs = append(runs, r)
		}
		exec(`INSERT INTO threads (thread_id, provider_key, agent_name, parent_thread_id, last_activity_at) VALUES ($1, $2, $3, $4, $5)`,
			th.id, testProviderKey, testAgent, parent, activity)
		for _, r := range runs {
			runID := run.NewRunID()
			exec(`INSERT INTO runs (run_id, thread_id, provider_key, agent_name, status, run_input, completed_at, last_activity_at)
				VALUES ($1, $2, $3, $4, $5, '{}', CASE WHEN $5 IN ('completed', 'cancelled') THEN $6::timestamptz END, $6)`,
				runID, th.id, testProviderKey, testAgent, r.status, r.at)
			for s := 1; s <= rng.IntN(3); s++ {
				exec(`INSERT INTO run_events (run_id, seq, event) VALUES ($1, $2, '{}')`, runID, s)
			}
			if rng.IntN(2) == 0 {
				exec(`INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin) VALUES ($1, $2, $3, '{}', 'caller')`,
					th.id, runID, "m-"+runID)
			}
		}
		threads = append(threads, th)
	}
	cutoff := time.Now().Add(-30 * 24 * time.Hour)
	preview, err := st.PrunePreview(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	var total store.Pruned
	for {
		limit := 1 + rng.IntN(7)
		p, err := st.PruneBatch(ctx, cutoff, limit)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		total = total.Add(p)
		if p.Runs < int64(limit) {
			break
		}
	}
	if total != preview {
		t.Fatalf("seed %d: the preview said %+v, the prune deleted %+v", seed, preview, total)
	}
	if p, err := st.PrunePreview(ctx, cutoff); err != nil || p != (store.Pruned{}) {
		t.Fatalf("seed %d: after the prune the preview says %+v (%v)", seed, p, err)
	}
	t.Logf("pruned %+v", total)
}

// A2A contexts opened one after another, each referencing a task of the
// one before, make a chain of child threads as deep as the conversation
// went on. Once every run on it is old, the prune deletes the whole chain,
// not the newest sixteen threads with the rest left empty for good (no
// run is left on them for a later pass to find them by).
func TestPruneDeletesADeepChainOfThreads(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	const depth = 40
	parent := ""
	var ids []string
	for i := 0; i < depth; i++ {
		r, _, err := st.CreateRun(ctx, store.NewRun{RunID: run.NewRunID(), ThreadID: run.NewThreadID(), ProviderKey: testProviderKey,
			AgentName: testAgent, RunInput: []byte(`{}`), CreateThread: &store.NewThread{ParentThreadID: parent}})
		if err != nil {
			t.Fatal(err)
		}
		parent = r.ThreadID
		ids = append(ids, r.ThreadID)
	}
	for _, q := range []string{
		`UPDATE runs SET status = 'completed', completed_at = now() - interval '40 days', last_activity_at = now() - interval '40 days'`,
		`UPDATE threads SET last_activity_at = now() - interval '40 days'`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := time.Now().Add(-30 * 24 * time.Hour)
	preview, err := st.PrunePreview(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	var total store.Pruned
	for _, limit := range []int{500, 500} { // a second pass finds nothing more
		p, err := st.PruneBatch(ctx, cutoff, limit)
		if err != nil {
			t.Fatal(err)
		}
		total = total.Add(p)
	}
	var left int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM threads WHERE thread_id = ANY($1)`, ids).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 || total.Threads != depth || total.Runs != depth {
		t.Fatalf("pruned %+v, %d of the chain's %d threads left behind with no run", total, left, depth)
	}
	if preview != total {
		t.Fatalf("the preview said %+v, the prune deleted %+v", preview, total)
	}
}

// Two prunes at once — `broker-node prune` run by an operator while the
// leader's retention pass runs, or a deposed leader's last batch beside
// its successor's — each deleting one of a thread's two old runs: the
// thread is left with none and must go too. Each batch used to look for
// the thread's other runs before the other batch committed, both kept the
// thread, and nothing ever looked at it again. The test holds the threads
// table until both batches have deleted their run and wait, so the
// window is hit every time.
func TestTwoPrunesAtOnceLeaveNoEmptyThread(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	first := oldSettledThread(t, st)
	second, _, err := st.CreateRun(ctx, store.NewRun{RunID: run.NewRunID(), ThreadID: first.ThreadID, ProviderKey: testProviderKey,
		AgentName: testAgent, RunInput: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE runs SET status = 'completed', completed_at = now() - interval '39 days', last_activity_at = now() - interval '39 days' WHERE run_id = $1`,
		`UPDATE threads SET last_activity_at = now() - interval '39 days' WHERE thread_id = (SELECT thread_id FROM runs WHERE run_id = $1)`,
	} {
		if _, err := st.Pool().Exec(ctx, q, second.RunID); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE threads IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-30 * 24 * time.Hour)
	done := make(chan error, 2)
	var pruned [2]store.Pruned
	for i := range pruned {
		go func() {
			var err error
			pruned[i], err = st.PruneBatch(ctx, cutoff, 1)
			done <- err
		}()
	}
	// Barrier: both batches wait on a lock (the threads table, or one on
	// the other).
	for {
		var waiting int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling a barrier, not timing an assertion
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range pruned {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	total := pruned[0].Add(pruned[1])
	var left int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM threads WHERE thread_id = $1`, first.ThreadID).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if total.Runs != 2 || left != 0 {
		t.Fatalf("two prunes at once deleted %+v; the thread, with no run left, is still there: %v", total, left == 1)
	}
}

// A pruner stuck inside its batch — a deposed leader frozen mid-batch, its
// session still open on PostgreSQL — holds the prune lock: the next
// leader's batch waits for it a bounded while and then fails naming why
// (the pass counts an error and tries again an Interval later), rather
// than hanging its pass for as long as the stuck session lives.
func TestPruneBatchBehindAStuckPrunerFails(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	oldSettledThread(t, st)
	defer store.SetPruneLockWait(50 * time.Millisecond)()
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, store.PruneLockKey); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.PruneBatch(ctx, time.Now().Add(-30*24*time.Hour), 10)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a hang guard, not a timing assertion
		t.Fatal("the batch still waits behind the stuck pruner after a minute")
	}
	if !errors.Is(err, store.ErrPruneBusy) {
		t.Fatalf("the batch behind a stuck pruner: %v, want store.ErrPruneBusy", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := st.PruneBatch(ctx, time.Now().Add(-30*24*time.Hour), 10); err != nil || p.Runs != 1 {
		t.Fatalf("once the stuck pruner is gone: %+v %v", p, err)
	}
}
