package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// A node starts only on the schema it was built for, and a refusal names
// the versions and the command to run.
func TestCheckSchema(t *testing.T) {
	ctx := context.Background()
	st := storetest.Store(t)
	if err := st.CheckSchema(ctx); err != nil {
		t.Fatalf("a migrated database refused: %v", err)
	}
	if _, err := st.Pool().Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`); err != nil {
		t.Fatal(err)
	}
	err := st.CheckSchema(ctx)
	if err == nil || !strings.Contains(err.Error(), "this binary needs") || !strings.Contains(err.Error(), "broker-node migrate") {
		t.Fatalf("a database one migration behind: %v", err)
	}
	if _, err := st.Pool().Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckSchema(ctx); err == nil || !strings.Contains(err.Error(), "broker-node migrate") {
		t.Fatalf("an empty database: %v", err)
	}
}

// A database a newer release migrated is refused naming both versions,
// and without telling the operator to run `broker-node migrate`, which
// has nothing to apply there.
func TestCheckSchemaOnANewerSchema(t *testing.T) {
	ctx := context.Background()
	st := storetest.Store(t)
	if _, err := st.Pool().Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied)
		SELECT max(version_id) + 1, true FROM goose_db_version`); err != nil {
		t.Fatal(err)
	}
	err := st.CheckSchema(ctx)
	if err == nil || !strings.Contains(err.Error(), "newer") || strings.Contains(err.Error(), "run `broker-node migrate`") {
		t.Fatalf("a database one migration ahead: %v; want a refusal saying it is newer than this binary", err)
	}
}

// The doors' check accepts the schema this binary needs and a newer one
// (a deploy migrates before the doors of its release replace the older),
// refuses an older one or none with the node's words, and leaves a
// database nobody migrated as it found it.
func TestCheckSchemaReached(t *testing.T) {
	ctx := context.Background()
	st := storetest.Store(t)
	if err := st.CheckSchemaReached(ctx); err != nil {
		t.Fatalf("a migrated database: %v", err)
	}
	if _, err := st.Pool().Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied)
		SELECT max(version_id) + 1, true FROM goose_db_version`); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckSchemaReached(ctx); err != nil {
		t.Fatalf("a database one migration ahead: %v; want it accepted", err)
	}
	if _, err := st.Pool().Exec(ctx, `DELETE FROM goose_db_version WHERE version_id >= (SELECT max(version_id) - 1 FROM goose_db_version)`); err != nil {
		t.Fatal(err)
	}
	var behind *store.SchemaBehindError
	if err := st.CheckSchemaReached(ctx); !errors.As(err, &behind) || behind.Applied != behind.Needed-1 ||
		!strings.Contains(err.Error(), "run `broker-node migrate`") {
		t.Fatalf("a database one migration behind: %v", err)
	}
	if _, err := st.Pool().Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	err := st.CheckSchemaReached(ctx)
	if !errors.As(err, &behind) || behind.Applied != 0 ||
		err.Error() != fmt.Sprintf("the database schema is at version 0, this binary needs %d: run `broker-node migrate`", behind.Needed) {
		t.Fatalf("an empty database: %v", err)
	}
	var tables int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("the check left %d tables (%v); want none", tables, err)
	}
}
