package store_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// migrateGuard bounds the test's waits: a hang detector, never a timing
// assertion (a healthy run takes well under a second).
const migrateGuard = 30 * time.Second

// lockWaiter reports whether a backend of url's database waits for a lock
// on table.
func lockWaiter(t *testing.T, conn *pgx.Conn, table string) bool {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
		WHERE NOT granted AND locktype = 'relation' AND relation = $1::regclass
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A migration that alters a table (00017's ALTER TABLE broker_leader)
// asks for an ACCESS EXCLUSIVE lock; while a long transaction holds any
// lock on the table, that request waits, and every ordinary query on the
// table — each broker write fences on broker_leader — queues behind it:
// an upgrade that stops the deployment. The migration waits at most its
// lock timeout (a few attempts), so the ordinary query goes through while
// the long transaction is still open, and migrate fails with an error
// naming the migration, the lock timeout and the session holding it.
// Once the transaction ends, migrate succeeds.
func TestMigrationGivesUpOnAHeldLock(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.MigrateDownTo(ctx, db, 16); err != nil {
		t.Fatal(err)
	}

	connect := func(app string) *pgx.Conn {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["application_name"] = app
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	// A long transaction that read the leader row and is still open.
	holder := connect("long-report")
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var epoch int64
	if err := tx.QueryRow(ctx, `SELECT epoch FROM broker_leader WHERE id = 1`).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	var holderPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}

	mctx, cancel := context.WithTimeout(ctx, migrateGuard)
	defer cancel()
	migrated := make(chan error, 1)
	go func() {
		migrated <- store.MigrateWith(mctx, url, store.MigrateOptions{LockTimeout: 200 * time.Millisecond, Attempts: 2})
	}()
	watch := connect("watch")
	deadline := time.Now().Add(migrateGuard)
	for !lockWaiter(t, watch, "broker_leader") {
		if time.Now().After(deadline) {
			t.Fatal("the migration never asked for its lock")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// An ordinary query, as a broker write's fence: it queued behind the
	// migration's lock request and goes through while the long
	// transaction is still open.
	reader := connect("broker")
	rctx, rcancel := context.WithTimeout(ctx, migrateGuard)
	defer rcancel()
	if err := reader.QueryRow(rctx, `SELECT epoch FROM broker_leader WHERE id = 1`).Scan(&epoch); err != nil {
		t.Fatalf("an ordinary read of broker_leader, queued behind the migration's lock request, "+
			"did not go through while the long transaction held its lock: %v", err)
	}

	err = <-migrated
	t.Logf("migrate: %v", err)
	if !errors.Is(err, store.ErrMigrationLockTimeout) {
		t.Fatalf("migrate: %v; want ErrMigrationLockTimeout", err)
	}
	for _, want := range []string{"00017_leader_funduq_key.sql", "200ms", "pid " + strconv.Itoa(holderPID), `"long-report"`,
		"idle in transaction"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("migrate's error does not say %q: %v", want, err)
		}
	}

	// The transaction ends: migrating again applies 00017.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.MigrateWith(ctx, url, store.MigrateOptions{LockTimeout: 200 * time.Millisecond}); err != nil {
		t.Fatalf("migrate after the transaction ended: %v", err)
	}
	applied, embedded, err := store.SchemaVersion(ctx, db)
	if err != nil || applied != embedded {
		t.Fatalf("schema at %d, want %d (%v)", applied, embedded, err)
	}
}

// CREATE INDEX CONCURRENTLY (00007) waits for every transaction with an
// older snapshot, holding nothing an ordinary query needs; under the
// migration's lock_timeout it would give up after it and leave an INVALID
// index, which the migration then has to set aside and build again on
// every attempt. So those statements run without the bound: with a long REPEATABLE READ
// transaction open, the build waits past the lock timeout, and it
// completes with valid indexes once the transaction ends.
func TestConcurrentIndexBuildsWaitWithoutTheLockTimeout(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.MigrateDownTo(ctx, db, 6); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&n); err != nil {
		t.Fatal(err)
	}

	mctx, cancel := context.WithTimeout(ctx, migrateGuard)
	defer cancel()
	migrated := make(chan error, 1)
	go func() {
		migrated <- store.MigrateWith(mctx, url, store.MigrateOptions{LockTimeout: 200 * time.Millisecond, Attempts: 1})
	}()
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	// The barrier: the build has waited for the transaction five times
	// its lock timeout, as PostgreSQL itself reports it.
	deadline := time.Now().Add(migrateGuard)
	for waited := false; !waited; {
		select {
		case err := <-migrated:
			t.Fatalf("the migration ended while the transaction was open: %v", err)
		default:
		}
		if err := watch.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query ILIKE 'CREATE%INDEX CONCURRENTLY%'
			AND now() - query_start > interval '1 second'`).Scan(&waited); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the index build never waited for the transaction")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("migrate: %v", err)
	}
	rows, err := watch.Query(ctx, `SELECT indexrelid::regclass::text FROM pg_index WHERE NOT indisvalid`)
	if err != nil {
		t.Fatal(err)
	}
	invalid, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(invalid) > 0 {
		t.Fatalf("invalid indexes after the migration: %v (%v)", invalid, err)
	}
}
