package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

const (
	testProviderKey = "29e5833a915a6429a4e3a7948475c338ef436eb82be89c92f059704403db9d55"
	testFingerprint = "a1d577350a959ecd"
	testAgent       = "echo"
)

// seedAgent registers the test provider and agent.
func seedAgent(t *testing.T, st *store.Store) {
	t.Helper()
	storetest.Agent(t, st, testProviderKey, testAgent)
}

// newRun creates a queued run on a new thread the way a door does.
func newRun(t *testing.T, st *store.Store) store.Run {
	t.Helper()
	runID, threadID := run.NewRunID(), run.NewThreadID()
	input, _ := json.Marshal(map[string]any{"threadId": threadID, "runId": runID})
	r, created, err := st.CreateRun(context.Background(), store.NewRun{
		RunID: runID, ThreadID: threadID, ProviderKey: testProviderKey, AgentName: testAgent,
		CreateThread: &store.NewThread{}, RunInput: input,
	})
	if err != nil || !created {
		t.Fatalf("create run: created=%v err=%v", created, err)
	}
	return r
}

// forceStatus puts a run straight into status s, bypassing the machine, so a
// test can start a transition from any status.
func forceStatus(t *testing.T, st *store.Store, runID string, s run.Status) {
	t.Helper()
	var reason any
	if s == run.Failed {
		reason = "seeded"
	}
	_, err := st.Pool().Exec(context.Background(),
		`UPDATE runs SET status = $2, failure_reason = $3 WHERE run_id = $1`, runID, string(s), reason)
	if err != nil {
		t.Fatal(err)
	}
}

// schemaBackTo takes st's database back to schema version with the
// migrations' own Down sections (store.MigrateDownTo), as an older release
// left it: a migration's test starts there, and migrations added later
// are undone with it without the test naming them.
func schemaBackTo(t *testing.T, st *store.Store, version int64) {
	t.Helper()
	db, err := sql.Open("pgx", st.Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.MigrateDownTo(context.Background(), db, version); err != nil {
		t.Fatal(err)
	}
}
