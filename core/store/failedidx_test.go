package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// Migration 00018 on failed runs an older release left without
// completed_at (written by hand), interrupted in its index build (a node
// stopped mid-deploy, a cancelled statement), run again, and taken down
// and up: runs_failed_idx ends valid each time, and the failures of the
// window are the ones the window counted before (by last activity when
// completed_at was missing). An interrupted CREATE INDEX CONCURRENTLY
// leaves an INVALID index behind, which IF NOT EXISTS then takes for
// built: the planner never reads it, and the console reads the whole
// runs table every 1.5 s again, while every failing run still writes it.
func TestFailedRunsIndexMigration(t *testing.T) {
	ctx := context.Background()
	st := storetest.Store(t)
	url := st.Pool().Config().ConnString()
	seedAgent(t, st)
	schemaBackTo(t, st, 17)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	recent, old, ended := newRun(t, st), newRun(t, st), newRun(t, st)
	for _, r := range []store.Run{recent, old, ended} {
		forceStatus(t, st, r.RunID, run.Failed)
	}
	exec(`UPDATE runs SET completed_at = NULL, last_activity_at = now() - interval '5 minutes' WHERE run_id = $1`, recent.RunID)
	exec(`UPDATE runs SET completed_at = NULL, last_activity_at = now() - interval '3 hours' WHERE run_id = $1`, old.RunID)
	exec(`UPDATE runs SET completed_at = now() - interval '1 minute' WHERE run_id = $1`, ended.RunID)
	var before int64
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE status = 'failed'
		AND coalesce(completed_at, last_activity_at) > now() - interval '1 hour'`).Scan(&before); err != nil || before != 2 {
		t.Fatalf("failures of the window before: %d %v", before, err)
	}

	// Interrupt the index build: a writer's open transaction holds it in
	// its wait, and the build is cancelled there.
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE runs SET last_activity_at = last_activity_at WHERE run_id = $1`, ended.RunID); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithTimeout(ctx, migrateGuard)
	defer cancel()
	migrated := make(chan error, 1)
	go func() { migrated <- store.MigrateWith(mctx, url, store.MigrateOptions{Attempts: 1}) }()
	deadline := time.Now().Add(migrateGuard)
	for cancelled := false; !cancelled; {
		select {
		case err := <-migrated:
			t.Fatalf("the migration ended while the writer was open: %v", err)
		default:
		}
		if err := st.Pool().QueryRow(ctx, `SELECT coalesce(bool_or(pg_cancel_backend(pid)), false) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			AND query ILIKE 'CREATE INDEX CONCURRENTLY%runs_failed_idx%'`).Scan(&cancelled); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the index build never waited for the writer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-migrated; err == nil {
		t.Fatal("the cancelled migration succeeded")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	check := func(when string) {
		t.Helper()
		var valid sql.NullBool
		if err := st.Pool().QueryRow(ctx, `SELECT bool_and(indisvalid) FROM pg_index
			WHERE indexrelid = to_regclass('runs_failed_idx')`).Scan(&valid); err != nil {
			t.Fatal(err)
		}
		if !valid.Valid || !valid.Bool {
			t.Errorf("%s: runs_failed_idx valid=%v (null: absent)", when, valid)
		}
		ov, err := st.RunsOverview(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		for _, f := range ov.Failures {
			n += f.Count
		}
		if n+ov.OmittedRuns != before {
			t.Errorf("%s: %d failures in the window, %d before the migration", when, n, before)
		}
	}
	if err := store.Migrate(ctx, url, nil); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	check("run again after an interrupted build")
	if err := store.Migrate(ctx, url, nil); err != nil {
		t.Fatalf("migrate a third time: %v", err)
	}
	check("run a third time")
	schemaBackTo(t, st, 17)
	if err := store.Migrate(ctx, url, nil); err != nil {
		t.Fatalf("migrate after down: %v", err)
	}
	check("down and up")
}
