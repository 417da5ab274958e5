package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/store/storetest"
)

// `broker-node migrate` waits for a lock at most FUNDUQ_MIGRATE_LOCK_TIMEOUT
// (design.md §Deployment): with a long transaction holding broker_leader,
// which the pending 00017 alters, it exits 1 saying which migration
// waited, how long, and which session holds the table, instead of
// hanging with every broker query queued behind its lock request.
func TestMigrateCommandReportsAHeldLock(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "nightly-report"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// 00017 pending again, as before an upgrade (and 00018 after it).
	if _, err := conn.Exec(ctx, `DROP INDEX runs_failed_idx; ALTER TABLE broker_leader DROP COLUMN funduq_key;
		DELETE FROM goose_db_version WHERE version_id IN (17, 18)`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE broker_leader IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	code := run([]string{"migrate"}, map[string]string{"FUNDUQ_DATABASE_URL": url, "FUNDUQ_MIGRATE_LOCK_TIMEOUT": "100ms"}, &out, &errb)
	say := errb.String()
	t.Logf("stderr: %s", say)
	if code != 1 {
		t.Fatalf("migrate with broker_leader held: exit %d, stderr %q; want 1", code, say)
	}
	for _, want := range []string{"00017_leader_funduq_key.sql waited 100ms for a lock", "FUNDUQ_MIGRATE_LOCK_TIMEOUT",
		`application_name "nightly-report"`, "on each of 3 attempts"} {
		if !strings.Contains(say, want) {
			t.Errorf("stderr does not say %q: %s", want, say)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"migrate"}, map[string]string{"FUNDUQ_DATABASE_URL": url, "FUNDUQ_MIGRATE_LOCK_TIMEOUT": "100ms"}, &out, &errb); code != 0 {
		t.Fatalf("migrate after the transaction ended: exit %d: %s", code, errb.String())
	}
}
