package store_test

import (
	"context"
	"strings"
	"testing"

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
