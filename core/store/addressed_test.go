package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// An interjection's addressed run id is a column of its own: what the door
// wrote reads back from every run read, and a reopen with a new input
// replaces it while one without keeps it.
func TestAddressedRunIDReadsBack(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	target := newRun(t, st)

	runID := run.NewRunID()
	input, _ := json.Marshal(map[string]any{"threadId": target.ThreadID, "runId": runID,
		"forwardedProps": map[string]any{"funduq": map[string]any{"addressedRunId": target.RunID}}})
	adm, err := st.Admit(ctx, store.NewRun{RunID: runID, ThreadID: target.ThreadID, ProviderKey: testProviderKey,
		AgentName: testAgent, RunInput: input, AddressedRunID: target.RunID})
	if err != nil || !adm.Created {
		t.Fatalf("admit: %+v %v", adm, err)
	}
	if adm.Run.AddressedRunID != target.RunID {
		t.Fatalf("admit returned addressed %q, want %q", adm.Run.AddressedRunID, target.RunID)
	}
	got, err := st.GetRun(ctx, runID)
	if err != nil || got.AddressedRunID != target.RunID {
		t.Fatalf("get run: addressed %q (%v), want %q", got.AddressedRunID, err, target.RunID)
	}
	queued, err := st.RunsInStatus(ctx, string(run.Queued))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, r := range queued {
		seen[r.RunID] = r.AddressedRunID
	}
	if seen[runID] != target.RunID || seen[target.RunID] != "" {
		t.Fatalf("recovery read addressed %q for the interjection and %q for its target", seen[runID], seen[target.RunID])
	}

	forceStatus(t, st, runID, run.InputRequired)
	if r, err := st.ReopenRun(ctx, store.Reopen{RunID: runID}); err != nil || r.AddressedRunID != target.RunID {
		t.Fatalf("reopen without an input: addressed %q (%v), want it kept", r.AddressedRunID, err)
	}
	forceStatus(t, st, runID, run.InputRequired)
	if r, err := st.ReopenRun(ctx, store.Reopen{RunID: runID, RunInput: []byte(`{"threadId":"x","runId":"y"}`)}); err != nil || r.AddressedRunID != "" {
		t.Fatalf("reopen with an ordinary input: addressed %q (%v), want none", r.AddressedRunID, err)
	}
}

// Runs written before migration 00013 carry the addressed run id only in
// their input; the migration copies it into the column, and an input whose
// member cannot be read as text (\u0000, which PostgreSQL's text refuses)
// neither fails the migration nor gets a value.
func TestMigrationBackfillsAddressedRunID(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	addressed, plain, broken := newRun(t, st), newRun(t, st), newRun(t, st)
	inputs := map[string]string{
		addressed.RunID: `{"threadId":"t","runId":"r","forwardedProps":{"funduq":{"addressedRunId":"run-target"}}}`,
		plain.RunID:     `{"threadId":"t","runId":"r","forwardedProps":{"addressedRunId":"not funduq's"}}`,
		broken.RunID:    `{"threadId":"t","runId":"r","forwardedProps":{"funduq":{"addressedRunId":"run-\u0000"}}}`,
	}
	// Back to schema 12: the column gone (and those of the migrations
	// after it), the inputs as an older door wrote them.
	pool := st.Pool()
	schemaBackTo(t, st, 12)
	for id, in := range inputs {
		if _, err := pool.Exec(ctx, `UPDATE runs SET run_input = $2::json WHERE run_id = $1`, id, in); err != nil {
			t.Fatalf("seed %s: %v", id, err)
		}
	}
	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.MigrateDB(ctx, db, nil); err != nil {
		t.Fatalf("migrate 12 → 13: %v", err)
	}
	for id, want := range map[string]string{addressed.RunID: "run-target", plain.RunID: "", broken.RunID: ""} {
		r, err := st.GetRun(ctx, id)
		if err != nil || r.AddressedRunID != want {
			t.Errorf("run with input %s: addressed %q (%v), want %q", inputs[id], r.AddressedRunID, err, want)
		}
	}
}
