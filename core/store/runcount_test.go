package store_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// A run contributes at most one of abandoned and undelivered (design.md
// §Counters), whichever leader counts it: the second count for the run,
// under a later epoch too, changes nothing; another run still counts.
func TestBumpForRunCountsARunOnce(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	first, _ := st.AdvanceEpoch(ctx, "node-a")
	r, other := newRun(t, st), newRun(t, st)
	q, counted, err := st.BumpForRun(ctx, first, testProviderKey, store.Undelivered, r.RunID)
	if err != nil || !counted || q.Undelivered != 1 {
		t.Fatalf("first count: %+v counted=%v err=%v", q, counted, err)
	}
	next, _ := st.AdvanceEpoch(ctx, "node-b")
	q, counted, err = st.BumpForRun(ctx, next, testProviderKey, store.Abandoned, r.RunID)
	if err != nil || counted || q.Abandoned != 0 || q.Undelivered != 1 {
		t.Fatalf("second count of one run: %+v counted=%v err=%v", q, counted, err)
	}
	q, counted, err = st.BumpForRun(ctx, next, testProviderKey, store.Abandoned, other.RunID)
	if err != nil || !counted || q.Abandoned != 1 {
		t.Fatalf("another run: %+v counted=%v err=%v", q, counted, err)
	}
	if _, _, err := st.BumpForRun(ctx, next, testProviderKey, store.Misdeclared, other.RunID); err == nil {
		t.Fatal("misdeclared counted per run")
	}
}

// Migration 00016 adds runs.holding_counted with a constant default: a
// catalog change, so a deployment with many runs migrates without a
// rewrite of the table (which would hold every door's write on runs for
// its length). The runs before it read as never counted.
func TestHoldingCountedMigrationDoesNotRewriteRuns(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	pool := st.Pool()
	schemaBackTo(t, st, 15)
	before := []string{newRun(t, st).RunID, newRun(t, st).RunID}
	var node int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_filenode('runs')::bigint`).Scan(&node); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.MigrateDB(ctx, db, nil); err != nil {
		t.Fatalf("migrate 15 → 16: %v", err)
	}
	var after int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_filenode('runs')::bigint`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != node {
		t.Fatalf("migration 00016 rewrote runs (file %d → %d)", node, after)
	}
	if err := st.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	for _, id := range before {
		if _, counted, err := st.BumpForRun(ctx, epoch, testProviderKey, store.Undelivered, id); err != nil || !counted {
			t.Fatalf("run %s from before the migration: counted=%v err=%v, want counted once", id, counted, err)
		}
	}
}

// A caller's answer reopens a paused run into a new round, claimed afresh
// with a whole new window (design.md §Counters): a count of the round
// before does not stand in for the new round's.
func TestReopenedRunIsCountedAfresh(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
	if _, counted, err := st.BumpForRun(ctx, epoch, testProviderKey, store.Undelivered, r.RunID); err != nil || !counted {
		t.Fatalf("round one: counted=%v err=%v", counted, err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET status = 'input-required' WHERE run_id = $1`, r.RunID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReopenRun(ctx, store.Reopen{RunID: r.RunID}); err != nil {
		t.Fatal(err)
	}
	q, counted, err := st.BumpForRun(ctx, epoch, testProviderKey, store.Abandoned, r.RunID)
	if err != nil || !counted || q.Undelivered != 1 || q.Abandoned != 1 {
		t.Fatalf("round two: %+v counted=%v err=%v, want one count for each round", q, counted, err)
	}
	if _, counted, _ := st.BumpForRun(ctx, epoch, testProviderKey, store.Undelivered, r.RunID); counted {
		t.Fatal("round two counted twice")
	}
}
