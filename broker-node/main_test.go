package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
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

// `broker-node lease status` names the leader; `lease handover` moves the
// lease to the standby and reports the new leader.
func TestLeaseCommands(t *testing.T) {
	a := nodetest.Start(t, nil)
	b := a.Peer("node-b")
	env := map[string]string{"FUNDUQ_DATABASE_URL": a.Cfg.DatabaseURL, "FUNDUQ_REDIS_URL": a.Cfg.RedisURL,
		"FUNDUQ_REDIS_PREFIX": a.Prefix}
	var out, errb bytes.Buffer
	if code := run([]string{"lease", "status", "--json"}, env, &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	var s leaseStatus
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || !s.Leading || s.Node != "test-node" || s.AdvertiseURL != a.URL || s.LeaseLeftMS <= 0 {
		t.Fatalf("status %s (%v)", out.String(), err)
	}
	out.Reset()
	if code := run([]string{"lease", "handover", "--wait", "15s"}, env, &out, &errb); code != 0 {
		t.Fatalf("handover: exit %d: %s %s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "node-b leads now") {
		t.Fatalf("handover said %q", out.String())
	}
	b.Eventually("b leads", b.Ready)
	out.Reset()
	run([]string{"lease", "status"}, env, &out, &errb)
	if !strings.Contains(out.String(), "leader:    node-b") {
		t.Fatalf("status after handover: %q", out.String())
	}
}
