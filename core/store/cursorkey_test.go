package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/funduq/funduq-go/core/store"
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
	if _, err := pool.Exec(ctx, `ALTER TABLE threads DROP COLUMN cursor_key;
		DELETE FROM goose_db_version WHERE version_id = 15`); err != nil {
		t.Fatal(err)
	}
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
