package store_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// Runs that failed before migration 00014 have no author beside their
// reason: the migration marks the provider's — every reason funduq never
// authors — and leaves funduq's own names (and runs that did not fail)
// funduq's.
func TestMigrationMarksProviderReasons(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	pool := st.Pool()
	want := map[string]bool{}
	fail := func(reason string, byProvider bool) {
		r := newRun(t, st)
		if _, err := pool.Exec(ctx, `UPDATE runs SET status = 'failed', failure_reason = $2 WHERE run_id = $1`, r.RunID, reason); err != nil {
			t.Fatal(err)
		}
		want[r.RunID] = byProvider
	}
	for _, r := range run.FunduqReasons {
		fail(string(r), false)
	}
	fail("overloaded", true)
	fail(strings.ToUpper(string(run.ReasonAgentOffline)), true)
	want[newRun(t, st).RunID] = false // queued

	// Back to schema 13: the column gone (and 00015's after it).
	schemaBackTo(t, st, 13)
	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.MigrateDB(ctx, db, nil); err != nil {
		t.Fatalf("migrate 13 → 14: %v", err)
	}
	for id, by := range want {
		r, err := st.GetRun(ctx, id)
		if err != nil || r.FailureByProvider != by {
			t.Errorf("run failed %q: by provider %v (%v), want %v", r.FailureReason, r.FailureByProvider, err, by)
		}
	}
}

// Only a run's end writes a provider's reason: a status move that carries
// one is refused rather than storing it as funduq's.
func TestTransitionRefusesAProvidersReason(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	r := newRun(t, st)
	_, err := st.Transition(context.Background(), store.Move{RunID: r.RunID, To: run.Failed, Writer: run.ByDoor,
		Reason: "overloaded", ReasonByProvider: true})
	if err == nil {
		t.Fatal("a move with a provider's reason was written")
	}
	if got, _ := st.GetRun(context.Background(), r.RunID); got.Status != run.Queued {
		t.Fatalf("status %s", got.Status)
	}
}
