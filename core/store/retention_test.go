package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// Retention deletes settled runs older than the cutoff with their events
// and messages, then the threads that leaves empty (and a parent once its
// last child went), in bounded batches; what is active, paused, recent, or
// shares a thread with something kept stays. The preview counts exactly
// what the batches then delete, and deletes nothing.
func TestPruneSettledRuns(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-40 * 24 * time.Hour)
	// settle puts a run in status s at time at, with n events and one message.
	settle := func(r store.Run, s run.Status, at time.Time, n int) {
		t.Helper()
		forceStatus(t, st, r.RunID, s)
		exec(`UPDATE runs SET completed_at = CASE WHEN $2 THEN $3::timestamptz END, last_activity_at = $3 WHERE run_id = $1`,
			r.RunID, s.Terminal(), at)
		exec(`UPDATE threads SET last_activity_at = $2 WHERE thread_id = $1`, r.ThreadID, at)
		for i := 1; i <= n; i++ {
			exec(`INSERT INTO run_events (run_id, seq, event) VALUES ($1, $2, '{"type":"X"}')`, r.RunID, i)
		}
		exec(`INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin) VALUES ($1, $2, $3, '{}', 'agent')`,
			r.ThreadID, r.RunID, "m-"+r.RunID)
	}
	onThread := func(threadID string) store.Run {
		t.Helper()
		runID := run.NewRunID()
		r, created, err := st.CreateRun(ctx, store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: testProviderKey,
			AgentName: testAgent, RunInput: []byte(`{}`)})
		if err != nil || !created {
			t.Fatalf("run on %s: %v", threadID, err)
		}
		return r
	}

	gone1 := newRun(t, st) // old, completed: goes with its thread
	settle(gone1, run.Completed, old, 3)
	gone2 := newRun(t, st) // old, failed: goes with its thread
	settle(gone2, run.Failed, old.Add(time.Minute), 2)
	mixedOld := newRun(t, st) // old, cancelled, but its thread has a recent run: the run goes, the thread stays
	settle(mixedOld, run.Cancelled, old, 1)
	mixedNew := onThread(mixedOld.ThreadID)
	settle(mixedNew, run.Completed, time.Now(), 1)
	paused := newRun(t, st) // old but input-required: stays
	settle(paused, run.InputRequired, old, 1)
	running := newRun(t, st) // old but running: stays
	settle(running, run.Running, old, 1)
	recent := newRun(t, st) // settled yesterday: stays
	settle(recent, run.Completed, time.Now().Add(-24*time.Hour), 1)
	// A parent thread whose own run and whose child's run are both old:
	// the child goes first, then the parent in the same batch.
	parent := newRun(t, st)
	settle(parent, run.Completed, old, 1)
	child := run.NewThreadID()
	r, _, err := st.CreateRun(ctx, store.NewRun{RunID: run.NewRunID(), ThreadID: child, ProviderKey: testProviderKey,
		AgentName: testAgent, RunInput: []byte(`{}`), CreateThread: &store.NewThread{ParentThreadID: parent.ThreadID}})
	if err != nil {
		t.Fatal(err)
	}
	settle(r, run.Completed, old, 1)

	cutoff := time.Now().Add(-30 * 24 * time.Hour)
	preview, err := st.PrunePreview(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Pruned{Runs: 5, Events: 8, Messages: 5, Threads: 4}); preview != want {
		t.Fatalf("preview %+v, want %+v (the parent is counted with its child)", preview, want)
	}
	var total store.Pruned
	var batches []int64
	for {
		p, err := st.PruneBatch(ctx, cutoff, 2)
		if err != nil {
			t.Fatal(err)
		}
		total = total.Add(p)
		batches = append(batches, p.Runs)
		if p.Runs < 2 {
			break
		}
	}
	if want := (store.Pruned{Runs: 5, Events: 8, Messages: 5, Threads: 4}); total != want {
		t.Fatalf("pruned %+v, want %+v", total, want)
	}
	if len(batches) != 3 || batches[0] != 2 || batches[1] != 2 || batches[2] != 1 {
		t.Fatalf("batches %v, want 2, 2, 1 (bounded)", batches)
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := st.Pool().QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, kept := range []store.Run{mixedNew, paused, running, recent} {
		if count(`SELECT count(*) FROM runs WHERE run_id = $1`, kept.RunID) != 1 ||
			count(`SELECT count(*) FROM run_events WHERE run_id = $1`, kept.RunID) != 1 ||
			count(`SELECT count(*) FROM threads WHERE thread_id = $1`, kept.ThreadID) != 1 {
			t.Errorf("run %s (or its events or thread) was deleted", kept.RunID)
		}
	}
	for _, th := range []string{gone1.ThreadID, gone2.ThreadID, parent.ThreadID, child} {
		if count(`SELECT count(*) FROM threads WHERE thread_id = $1`, th) != 0 {
			t.Errorf("thread %s left empty was kept", th)
		}
	}
	if n := count(`SELECT count(*) FROM runs WHERE run_id = $1`, mixedOld.RunID); n != 0 {
		t.Error("the old run beside a recent one was kept")
	}
	if n := count(`SELECT count(*) FROM thread_messages WHERE thread_id = $1`, mixedOld.ThreadID); n != 1 {
		t.Errorf("thread %s keeps %d messages, want the recent run's one", mixedOld.ThreadID, n)
	}
	// Nothing is left to prune, and the preview says so.
	if p, err := st.PrunePreview(ctx, cutoff); err != nil || p != (store.Pruned{}) {
		t.Fatalf("after: preview %+v %v", p, err)
	}
}
