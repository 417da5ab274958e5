package main

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// `broker-node migrate` brings an empty database to the embedded schema, and
// running it again changes nothing.
func TestMigrateCommand(t *testing.T) {
	url := storetest.URL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		var out, errb bytes.Buffer
		if code := run([]string{"migrate"}, map[string]string{"FUNDUQ_DATABASE_URL": url}, &out, &errb); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, errb.String())
		}
		applied, embedded, err := store.SchemaVersion(context.Background(), db)
		if err != nil || applied != embedded || applied == 0 {
			t.Fatalf("run %d: schema applied %d embedded %d err %v", i, applied, embedded, err)
		}
	}
}

func TestCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		code int
		say  string
	}{
		{[]string{"serve"}, map[string]string{}, 2, "FUNDUQ_DATABASE_URL: required and not set"},
		{[]string{"frobnicate"}, nil, 2, `unknown command "frobnicate"`},
		{[]string{"migrate"}, map[string]string{}, 2, "FUNDUQ_DATABASE_URL: required and not set"},
		{[]string{"migrate"}, map[string]string{"FUNDUQ_DATABASE_URL": "mysql://x"}, 2, "want a postgres:// URL"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, tc.env, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.say) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.say)
		}
	}
}
