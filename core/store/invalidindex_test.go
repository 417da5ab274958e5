package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// invalidIndexErrors are the indexes each ERROR record of log names.
func invalidIndexErrors(t *testing.T, log *bytes.Buffer) [][]string {
	t.Helper()
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Level   string   `json:"level"`
			Msg     string   `json:"msg"`
			Indexes []string `json:"indexes"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Level == "ERROR" && strings.Contains(rec.Msg, "REINDEX INDEX CONCURRENTLY") {
			out = append(out, rec.Indexes)
		}
	}
	return out
}

// An index left invalid by an interrupted concurrent build is read by no
// query, and a unique one may enforce nothing; migrate cannot repair one a
// recorded migration left. So migrate and a node's start (CheckSchema)
// name it at ERROR with the remedy, and say nothing of an index a build
// is still working on.
func TestMigrateAndCheckSchemaNameInvalidIndexes(t *testing.T) {
	ctx := context.Background()
	st := storetest.Store(t)
	seedHistory(t, st)
	url := st.Pool().Config().ConnString()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	var quiet bytes.Buffer
	if err := store.MigrateDB(ctx, db, jsonLogger(&quiet)); err != nil {
		t.Fatal(err)
	}
	if got := invalidIndexErrors(t, &quiet); len(got) != 0 {
		t.Fatalf("a clean schema named invalid indexes: %v", got)
	}

	// A concurrent build that fails (a unique index over repeated values)
	// leaves its index behind, invalid: for real, as an interrupted one.
	if _, err := st.Pool().Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY runs_agent_uq ON runs (agent_name)`); err == nil {
		t.Fatal("a unique build over repeated agent names succeeded")
	}
	var migrated bytes.Buffer
	if err := store.MigrateDB(ctx, db, jsonLogger(&migrated)); err != nil {
		t.Fatal(err)
	}
	if got := invalidIndexErrors(t, &migrated); len(got) != 1 || !slices.Equal(got[0], []string{"runs_agent_uq"}) {
		t.Errorf("migrate over an invalid index logged %v; want one ERROR naming runs_agent_uq\n%s", got, migrated.String())
	}
	var started bytes.Buffer
	if err := store.New(st.Pool(), jsonLogger(&started)).CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if got := invalidIndexErrors(t, &started); len(got) != 1 || !slices.Equal(got[0], []string{"runs_agent_uq"}) {
		t.Errorf("CheckSchema over an invalid index logged %v; want one ERROR naming runs_agent_uq\n%s", got, started.String())
	}

	// A build in progress is invalid until it ends, and is no leftover:
	// hold it waiting for a writer on the table, look, then let it end.
	if _, err := st.Pool().Exec(ctx, `DROP INDEX CONCURRENTLY runs_agent_uq`); err != nil {
		t.Fatal(err)
	}
	holder := connectApp(t, url, "holder")
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET last_activity_at = last_activity_at WHERE run_id = (SELECT min(run_id) FROM runs)`); err != nil {
		t.Fatal(err)
	}
	builder := connectApp(t, url, "builder")
	built := make(chan error, 1)
	go func() {
		_, err := builder.Exec(ctx, `CREATE INDEX CONCURRENTLY runs_agent_building_idx ON runs (agent_name)`)
		built <- err
	}()
	watch := connectApp(t, url, "watch")
	for deadline := time.Now().Add(migrateGuard); ; time.Sleep(5 * time.Millisecond) {
		var waiting bool
		if err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_progress_create_index p
			JOIN pg_index i ON i.indexrelid = p.index_relid
			WHERE p.index_relid = to_regclass('runs_agent_building_idx') AND NOT i.indisvalid)`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the build never showed as in progress")
		}
	}
	names, err := store.InvalidIndexes(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Errorf("InvalidIndexes named %v while the only invalid index was being built", names)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-built; err != nil {
		t.Fatalf("the held build: %v", err)
	}
	if names, err := store.InvalidIndexes(ctx, db); err != nil || len(names) != 0 {
		t.Errorf("after the build ended: %v %v", names, err)
	}
}

func jsonLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, nil))
}
