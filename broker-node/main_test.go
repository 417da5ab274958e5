package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// `broker-node migrate` brings an empty database to the embedded schema, and
// running it again changes nothing.
func TestMigrateCommand(t *testing.T) {
	url := storetest.EmptyURL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
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

// `broker-node migrate` on a database a newer release migrated (a binary
// rolled back, or a host booting an old image) applies nothing and says
// so: exit 0, as a host of an older release booting expects
// (infra/broker.yaml), but with a warning naming both versions, not
// "current", which would hide why the node then refuses to start.
func TestMigrateOnANewerSchema(t *testing.T) {
	url := storetest.URL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, embedded, err := store.SchemaVersion(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, embedded+1); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"migrate"}, map[string]string{"FUNDUQ_DATABASE_URL": url}, &out, &errb)
	say := errb.String()
	if code != 0 || strings.Contains(say, "schema is current") || !strings.Contains(say, `"level":"WARN"`) ||
		!strings.Contains(say, "newer than this binary") {
		t.Fatalf("migrate on a schema one version newer: exit %d, stderr %q; want 0 with a warning saying the schema is newer than this binary", code, say)
	}
}

// `broker-node migrate` takes no arguments: one it does not know (say an
// operator's --dry-run, which it does not have) is refused with exit 2
// before anything is applied, not ignored while the schema is migrated.
func TestMigrateRefusesArguments(t *testing.T) {
	url := storetest.EmptyURL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, args := range [][]string{{"migrate", "--dry-run"}, {"migrate", "now"}} {
		var out, errb bytes.Buffer
		code := run(args, map[string]string{"FUNDUQ_DATABASE_URL": url}, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), args[1]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %q", args, code, errb.String(), args[1])
		}
		var tables int
		if err := db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if tables != 0 {
			t.Fatalf("%v migrated the database (%d tables)", args, tables)
		}
	}
}

// Every command answers -h and --help with its usage on stdout and exit 0,
// reading no setting: an operator who types `broker-node migrate --help`
// (as `lease --help` and `prune --help` answer) was refused "unexpected
// argument" with exit 2 instead.
func TestCommandsAnswerHelp(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"migrate", "--help"}, {"migrate", "-h"},
		{"lease", "--help"}, {"prune", "--help"},
	} {
		var out, errb bytes.Buffer
		code := run(args, map[string]string{}, &out, &errb)
		if code != 0 || !strings.Contains(out.String(), "usage: broker-node "+strings.TrimPrefix(strings.TrimPrefix(args[0], "--help"), "-h")) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and its usage on stdout", args, code, out.String(), errb.String())
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
		{[]string{"migrate"}, map[string]string{"FUNDUQ_DATABASE_URL": "postgres://x/y", "FUNDUQ_MIGRATE_LOCK_TIMEOUT": "-1s"}, 2,
			"FUNDUQ_MIGRATE_LOCK_TIMEOUT: want 0 (no bound) or more"},
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

// `lease handover` with no standby: the leader hands over, nobody else
// takes the lease, and after its cool-off the same node takes it back
// under a new epoch. The operator about to stop that host must not be
// told the handover succeeded: the command fails saying nobody took over.
func TestLeaseHandoverWithoutAStandby(t *testing.T) {
	a := nodetest.Start(t, nil)
	env := map[string]string{"FUNDUQ_DATABASE_URL": a.Cfg.DatabaseURL, "FUNDUQ_REDIS_URL": a.Cfg.RedisURL,
		"FUNDUQ_REDIS_PREFIX": a.Prefix}
	var out, errb bytes.Buffer
	code := run([]string{"lease", "handover", "--wait", "15s"}, env, &out, &errb)
	if code == 0 || strings.Contains(out.String(), "leads now") || !strings.Contains(errb.String(), "standby") {
		t.Fatalf("handover with no standby: exit %d, stdout %q, stderr %q; want a failure saying no standby took over",
			code, out.String(), errb.String())
	}
}

// emptyLeaseEnv is the lease tool's environment on stores nobody leads.
func emptyLeaseEnv(t *testing.T) map[string]string {
	t.Helper()
	_, prefix := redistest.Client(t)
	return map[string]string{"FUNDUQ_DATABASE_URL": storetest.URL(t), "FUNDUQ_REDIS_URL": redistest.URL(),
		"FUNDUQ_REDIS_PREFIX": prefix}
}

// The lease command refuses what it does not understand, naming it, with
// exit 2 and before it does anything: an operator's typo must not turn into
// a handover with the default wait, or a status in the wrong format.
func TestLeaseCommandRefusesLooseArguments(t *testing.T) {
	env := emptyLeaseEnv(t)
	for _, tc := range []struct {
		args []string
		say  string
	}{
		{[]string{"lease", "status", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"lease", "status", "--json", "extra"}, `unexpected argument "extra"`},
		{[]string{"lease", "status", "extra"}, `unexpected argument "extra"`},
		{[]string{"lease", "status", "--json=maybe"}, `invalid boolean value "maybe" for -json`},
		{[]string{"lease", "handover", "--wait"}, "flag needs an argument: -wait"},
		{[]string{"lease", "handover", "--wait", "soon"}, `invalid value "soon" for flag -wait`},
		{[]string{"lease", "handover", "--wait", "30"}, `missing unit in duration "30"`},
		{[]string{"lease", "handover", "--wait", "-1s"}, "-wait: want a duration above 0 (e.g. 30s), got -1s"},
		{[]string{"lease", "handover", "--wait", "0s"}, "-wait: want a duration above 0 (e.g. 30s), got 0s"},
		{[]string{"lease", "handover", "--wait", "5s", "extra"}, `unexpected argument "extra"`},
		{[]string{"lease", "handover", "--json"}, "flag provided but not defined: -json"},
		{[]string{"lease", "frobnicate"}, `unknown command "frobnicate"`},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, env, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.say) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout and %q", tc.args, code, out.String(), errb.String(), tc.say)
		}
	}
}

// signalWriter is stdout that closes said once it has been written to.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	once sync.Once
	said chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.once.Do(func() { close(w.said) })
	return w.buf.Write(p)
}

// An operator's Ctrl-C while `lease handover` waits for the new leader ends
// the wait at once, with exit 1 and a message saying what is left to check,
// rather than waiting out --wait.
func TestLeaseHandoverInterrupted(t *testing.T) {
	env := emptyLeaseEnv(t)
	// A leader of record that never answers a handover request: nothing
	// subscribes to the lease channel, so the wait can only end by --wait
	// or the interrupt.
	st, err := store.Open(context.Background(), env["FUNDUQ_DATABASE_URL"], store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.AdvanceEpoch(context.Background(), "ghost", "http://ghost.invalid"); err != nil {
		t.Fatal(err)
	}
	rdb, _ := redistest.Client(t)
	if err := rdb.Set(context.Background(), node.LeaseKey(env["FUNDUQ_REDIS_PREFIX"]), "ghost 1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	out := &signalWriter{said: make(chan struct{})}
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"lease", "handover", "--wait", "1h"}, env, out, &errb) }()
	select {
	case <-out.said: // "asked ghost (epoch 1) to hand over": it waits now
	case code := <-done:
		t.Fatalf("handover ended before it waited: exit %d: %s %s", code, out.buf.String(), errb.String())
	case <-time.After(nodetestGuard):
		t.Fatal("handover never asked")
	}
	// What Ctrl-C sends; run catches it while it runs.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(errb.String(), "interrupted while waiting for a new leader") ||
			!strings.Contains(errb.String(), "lease status") {
			t.Fatalf("exit %d, stderr %q; want exit 1 and the interrupt named", code, errb.String())
		}
	case <-time.After(nodetestGuard):
		t.Fatalf("still waiting %s after the interrupt (stdout %q)", nodetestGuard, out.buf.String())
	}
}

// nodetestGuard bounds a wait for something that takes milliseconds; a hang
// detector, never a timing assertion.
const nodetestGuard = 15 * time.Second
