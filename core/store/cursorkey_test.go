package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/preseed"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// Each thread has its own key to seal its page cursors (design.md §The
// doors, "A thread snapshot is one bounded page"): threads made before
// migration 00015 get one each from it, a thread made after gets one at
// its insert, and no two share one.
func TestEveryThreadHasItsOwnCursorKey(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	pool := st.Pool()
	before := []string{newRun(t, st).ThreadID, newRun(t, st).ThreadID, newRun(t, st).ThreadID}

	// Back to schema 14: the column gone.
	schemaBackTo(t, st, 14)
	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.MigrateDB(ctx, db, nil); err != nil {
		t.Fatalf("migrate 14 → 15: %v", err)
	}
	threads := append(before, newRun(t, st).ThreadID, newRun(t, st).ThreadID)
	var keys [][]byte
	for _, id := range threads {
		th, err := st.GetThread(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(th.CursorKey) != 32 {
			t.Fatalf("thread %s: a cursor key of %d bytes, want 32", id, len(th.CursorKey))
		}
		for i, k := range keys {
			if bytes.Equal(k, th.CursorKey) {
				t.Fatalf("threads %s and %s share a cursor key", threads[i], id)
			}
		}
		keys = append(keys, th.CursorKey)
	}
}

// A bulk seed (preseed, one INSERT … SELECT over generate_series per
// chunk) gives every thread its own key: the column's default is volatile,
// drawn per row, not once per statement. And 00015 stepped down and up
// again on a database holding threads leaves each with a new key of its
// own, the schema current again.
func TestCursorKeysOfSeededAndRemigratedThreads(t *testing.T) {
	ctx := context.Background()
	pool := storetest.Pool(t)
	st := store.New(pool, nil)
	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := preseed.Seed(ctx, db, preseed.Options{Runs: 400, RunsPerThread: 2, ProviderKey: testProviderKey,
		Fingerprint: testFingerprint, AgentName: testAgent, Prefix: "k"}); err != nil {
		t.Fatal(err)
	}
	distinct := func(when string) map[string]string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT thread_id, encode(cursor_key, 'hex') FROM threads`)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		keys := map[string]string{}
		owner := map[string]string{}
		for rows.Next() {
			var id, k string
			if err := rows.Scan(&id, &k); err != nil {
				t.Fatal(err)
			}
			if o, ok := owner[k]; ok {
				t.Fatalf("%s: threads %s and %s share cursor key %s", when, o, id, k)
			}
			if len(k) != 64 {
				t.Fatalf("%s: thread %s has a key of %d hex digits", when, id, len(k))
			}
			owner[k], keys[id] = id, k
		}
		if len(keys) != 200 {
			t.Fatalf("%s: %d threads, want 200", when, len(keys))
		}
		return keys
	}
	seeded := distinct("seeded")

	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS("migrations"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 14); err != nil {
		t.Fatalf("down to 14: %v", err)
	}
	if err := st.CheckSchema(ctx); err == nil {
		t.Fatal("CheckSchema took a schema without 00015")
	}
	if err := store.MigrateDB(ctx, db, nil); err != nil {
		t.Fatalf("14 → 15 again: %v", err)
	}
	if err := st.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after up again: %v", err)
	}
	again := distinct("migrated again")
	for id, k := range again {
		if seeded[id] == k {
			t.Fatalf("thread %s kept its key over down and up", id)
		}
		th, err := st.GetThread(ctx, id)
		if err != nil || hex.EncodeToString(th.CursorKey) != k {
			t.Fatalf("GetThread %s: %x, %v; stored %s", id, th.CursorKey, err, k)
		}
	}
}

// Migration 00015 adds the key without rewriting threads: a volatile
// default on ADD COLUMN rewrites the table and its indexes under an ACCESS
// EXCLUSIVE lock, and every door reading or writing a thread waits for it
// (about 8 s per million threads on a test machine; the doors answer 503
// after door.StorageTimeout). Like 00007's indexes, built CONCURRENTLY so
// as not to hold the doors, it takes only brief catalog locks and fills
// the keys row by row. Run again after stopping part way (a column with
// some keys missing), it finishes the job.
func TestCursorKeyMigrationDoesNotRewriteThreads(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	pool := st.Pool()
	threads := []string{newRun(t, st).ThreadID, newRun(t, st).ThreadID, newRun(t, st).ThreadID}
	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	filenode := func() (n int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT pg_relation_filenode('threads')::bigint`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, partly := range []bool{false, true} {
		schemaBackTo(t, st, 14)
		if partly {
			// Stopped after its first step: the column and its default,
			// the threads before it without keys.
			if _, err := pool.Exec(ctx, `ALTER TABLE threads ADD COLUMN cursor_key bytea`); err != nil {
				t.Fatal(err)
			}
			threads = append(threads, newRun(t, st).ThreadID)
		} else {
			// The walk along the primary key starts above ''.
			if _, err := pool.Exec(ctx, `INSERT INTO threads (thread_id, provider_key, agent_name) VALUES ('', $1, $2)`,
				testProviderKey, testAgent); err != nil {
				t.Fatal(err)
			}
			threads = append(threads, "")
		}
		before := filenode()
		if err := store.MigrateDB(ctx, db, nil); err != nil {
			t.Fatalf("migrate 14 → 15 (partly done before: %v): %v", partly, err)
		}
		if after := filenode(); after != before {
			t.Fatalf("migration 00015 rewrote threads (file %d → %d; partly done before: %v)", before, after, partly)
		}
		if err := st.CheckSchema(ctx); err != nil {
			t.Fatal(err)
		}
		threads = append(threads, newRun(t, st).ThreadID)
		seen := map[string]string{}
		for _, id := range threads {
			th, err := st.GetThread(ctx, id)
			if err != nil || len(th.CursorKey) != 32 {
				t.Fatalf("thread %s: a key of %d bytes, %v", id, len(th.CursorKey), err)
			}
			if o, ok := seen[string(th.CursorKey)]; ok {
				t.Fatalf("threads %s and %s share a key", o, id)
			}
			seen[string(th.CursorKey)] = id
		}
		// The column holds a 32-byte key or nothing is written.
		for _, bad := range []string{`NULL`, `'\x00'::bytea`} {
			if _, err := pool.Exec(ctx, `UPDATE threads SET cursor_key = `+bad+` WHERE thread_id = $1`, threads[0]); err == nil {
				t.Fatalf("a thread's key was set to %s", bad)
			}
		}
	}
}
