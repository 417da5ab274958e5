package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	runid "github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// `broker-node prune --older-than 720h --dry-run` prints what it would
// delete and deletes nothing; without --dry-run it deletes exactly that.
func TestPruneCommand(t *testing.T) {
	url := storetest.URL(t)
	st, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	key := strings.Repeat("c3", 32)
	storetest.Agent(t, st, key, "echo")
	for i, age := range []time.Duration{40 * 24 * time.Hour, 40 * 24 * time.Hour, time.Hour} {
		r, _, err := st.CreateRun(ctx, store.NewRun{RunID: runid.NewRunID(), ThreadID: runid.NewThreadID(), ProviderKey: key,
			AgentName: "echo", RunInput: []byte(`{}`), CreateThread: &store.NewThread{}})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if _, err := st.Pool().Exec(ctx, `UPDATE runs SET status = 'cancelled', completed_at = $2, last_activity_at = $2 WHERE run_id = $1`, r.RunID, at); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Pool().Exec(ctx, `UPDATE threads SET last_activity_at = $2 WHERE thread_id = $1`, r.ThreadID, at); err != nil {
			t.Fatal(err)
		}
		for s := 1; s <= i+1; s++ {
			if _, err := st.Pool().Exec(ctx, `INSERT INTO run_events (run_id, seq, event) VALUES ($1, $2, '{}')`, r.RunID, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	env := map[string]string{"FUNDUQ_DATABASE_URL": url}
	count := func() (n int) {
		t.Helper()
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var out, errb bytes.Buffer
	if code := run([]string{"prune", "--older-than", "720h", "--dry-run"}, env, &out, &errb); code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "would delete") || !strings.Contains(out.String(), ": 2 runs, 3 events, 0 messages, 0 answer requests, 2 threads") || count() != 3 {
		t.Fatalf("dry run printed %q, %d runs left", out.String(), count())
	}
	out.Reset()
	if code := run([]string{"prune", "--older-than", "720h"}, env, &out, &errb); code != 0 {
		t.Fatalf("prune: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "deleted settled before") || !strings.Contains(out.String(), ": 2 runs, 3 events, 0 messages, 0 answer requests, 2 threads") || count() != 1 {
		t.Fatalf("prune printed %q, %d runs left", out.String(), count())
	}

	// --agents-older-than alone: a stranger's records nobody served for 8
	// days go; the agent the kept run names stays.
	stranger := strings.Repeat("d4", 32)
	for _, q := range []string{
		`INSERT INTO providers (public_key, fingerprint, first_seen_at, updated_at) VALUES ($1, 'd4d4d4d4d4d4d4d4', now() - interval '8 days', now() - interval '8 days')`,
		`INSERT INTO agents (provider_key, name, last_seen_at, unserved_since) VALUES ($1, 'x', now() - interval '8 days', now() - interval '8 days')`,
		`UPDATE agents SET last_seen_at = now() - interval '8 days' WHERE provider_key <> $1`,
	} {
		if _, err := st.Pool().Exec(ctx, q, stranger); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	if code := run([]string{"prune", "--agents-older-than", "168h", "--dry-run"}, env, &out, &errb); code != 0 {
		t.Fatalf("records dry run: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "would delete unserved since before") || !strings.Contains(out.String(), ": 1 agents, 1 providers") || strings.Contains(out.String(), "runs") {
		t.Fatalf("records dry run printed %q", out.String())
	}
	out.Reset()
	if code := run([]string{"prune", "--agents-older-than", "168h"}, env, &out, &errb); code != 0 {
		t.Fatalf("records prune: exit %d: %s", code, errb.String())
	}
	var agents int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM agents`).Scan(&agents); err != nil || agents != 1 || count() != 1 ||
		!strings.Contains(out.String(), ": 1 agents, 1 providers") {
		t.Fatalf("records prune printed %q; %d agents, %d runs left (%v)", out.String(), agents, count(), err)
	}
	for _, args := range [][]string{{"prune"}, {"prune", "--older-than", "10m"}, {"prune", "--older-than", "720h", "extra"}, {"prune", "--bogus"},
		{"prune", "--agents-older-than", "10m"}} {
		errb.Reset()
		if code := run(args, env, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

// A wrong prune command line is refused (exit 2) naming what is wrong, as
// `lease` does, before any store is touched: the operator about to delete
// data sees which part to fix, not only the usage.
func TestPruneCommandNamesTheMistake(t *testing.T) {
	env := map[string]string{"FUNDUQ_DATABASE_URL": "postgres://127.0.0.1:1/none"}
	for _, tc := range []struct {
		args []string
		say  string
	}{
		{[]string{"prune"}, "--older-than is required"},
		{[]string{"prune", "--older-than", "10m"}, "--older-than 10m0s is under 1h"},
		{[]string{"prune", "--older-than", "-720h"}, "--older-than -720h0m0s is under 1h"},
		{[]string{"prune", "--older-than", "720h", "extra"}, `unexpected argument "extra"`},
		{[]string{"prune", "--older-than", "720h", "--batch", "0"}, "--batch 0 is outside 1-10000"},
		{[]string{"prune", "--older-than", "720"}, `invalid value "720" for flag -older-than`},
		// Days are no Go duration unit: say so, not only "parse error".
		{[]string{"prune", "--older-than", "30d"}, `unknown unit "d"`},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, env, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.say) || !strings.Contains(errb.String(), "usage: broker-node prune") {
			t.Errorf("%v: exit %d, stderr %q; want 2 saying %q, with the usage", tc.args, code, errb.String(), tc.say)
		}
	}
}

// prune against a database without funduq's schema (a wrong
// FUNDUQ_DATABASE_URL, or one never migrated) refuses as the node does,
// saying what to run, and does not report anything deleted.
func TestPruneCommandOnAnUnmigratedDatabase(t *testing.T) {
	url := storetest.EmptyURL(t)
	env := map[string]string{"FUNDUQ_DATABASE_URL": url}
	for _, args := range [][]string{{"prune", "--older-than", "720h", "--dry-run"}, {"prune", "--older-than", "720h"}} {
		var out, errb bytes.Buffer
		code := run(args, env, &out, &errb)
		if code == 0 || strings.Contains(out.String(), "delete") || !strings.Contains(errb.String(), "broker-node migrate") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a failure naming `broker-node migrate` and nothing reported deleted",
				args, code, out.String(), errb.String())
		}
	}
}

// With both flags a pass deletes the settled runs first, so an agent whose
// only conversation was those runs goes in the same pass: the dry run must
// count it too, or it promises less than the prune deletes.
func TestPruneDryRunCountsAgentsTheRunsPruneFrees(t *testing.T) {
	url := storetest.URL(t)
	st, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	key := strings.Repeat("e5", 32)
	storetest.Agent(t, st, key, "old")
	r, _, err := st.CreateRun(ctx, store.NewRun{RunID: runid.NewRunID(), ThreadID: runid.NewThreadID(), ProviderKey: key,
		AgentName: "old", RunInput: []byte(`{}`), CreateThread: &store.NewThread{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE runs SET status = 'cancelled', completed_at = now() - interval '40 days', last_activity_at = now() - interval '40 days' WHERE run_id = $1`,
		`UPDATE threads SET last_activity_at = now() - interval '40 days' WHERE thread_id = (SELECT thread_id FROM runs WHERE run_id = $1)`,
		`UPDATE agents SET served_epoch = NULL, last_seen_at = now() - interval '40 days', unserved_since = now() - interval '40 days' WHERE $1 <> ''`,
		`UPDATE providers SET first_seen_at = now() - interval '40 days', updated_at = now() - interval '40 days' WHERE $1 <> ''`,
	} {
		if _, err := st.Pool().Exec(ctx, q, r.RunID); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"FUNDUQ_DATABASE_URL": url}
	var dry, real, errb bytes.Buffer
	if code := run([]string{"prune", "--older-than", "720h", "--agents-older-than", "168h", "--dry-run"}, env, &dry, &errb); code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errb.String())
	}
	if code := run([]string{"prune", "--older-than", "720h", "--agents-older-than", "168h"}, env, &real, &errb); code != 0 {
		t.Fatalf("prune: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(real.String(), ": 1 agents, 1 providers") {
		t.Fatalf("prune printed %q; want the agent and its provider deleted", real.String())
	}
	if !strings.Contains(dry.String(), ": 1 agents, 1 providers") {
		t.Fatalf("the dry run printed %q, the prune then %q", dry.String(), real.String())
	}
}

// A thread with a child (an A2A task referenced by a later one), both
// settled long ago: the prune deletes the child and then the parent, in
// the same pass (store.PruneBatch walks up), and with them frees the agent
// only they named. The dry run must say so, not promise fewer threads and
// agents than the prune then deletes. A third thread kept by a recent
// run, with an old child thread, keeps its agent and is not counted.
func TestPruneDryRunCountsParentThreadsWithTheirChildren(t *testing.T) {
	url := storetest.URL(t)
	st, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	key := strings.Repeat("f6", 32)
	storetest.Agent(t, st, key, "lineage")
	storetest.Agent(t, st, key, "kept")
	turn := func(agent, parent string, age time.Duration) string {
		t.Helper()
		thread := runid.NewThreadID()
		r, _, err := st.CreateRun(ctx, store.NewRun{RunID: runid.NewRunID(), ThreadID: thread, ProviderKey: key,
			AgentName: agent, RunInput: []byte(`{}`), CreateThread: &store.NewThread{ParentThreadID: parent}})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`UPDATE runs SET status = 'completed', completed_at = now() - $2::interval, last_activity_at = now() - $2::interval WHERE run_id = $1`,
			`UPDATE threads SET last_activity_at = now() - $2::interval WHERE thread_id = (SELECT thread_id FROM runs WHERE run_id = $1)`,
		} {
			if _, err := st.Pool().Exec(ctx, q, r.RunID, age.String()); err != nil {
				t.Fatal(err)
			}
		}
		return thread
	}
	const old = 40 * 24 * time.Hour
	grandparent := turn("lineage", "", old)
	parent := turn("lineage", grandparent, old)
	turn("lineage", parent, old)
	keptParent := turn("kept", "", time.Hour) // recent: stays, and keeps "kept"
	turn("kept", keptParent, old)             // old child of it: goes
	for _, q := range []string{
		`UPDATE agents SET served_epoch = NULL, last_seen_at = now() - interval '40 days', unserved_since = now() - interval '40 days'`,
		`UPDATE providers SET first_seen_at = now() - interval '40 days', updated_at = now() - interval '40 days'`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"FUNDUQ_DATABASE_URL": url}
	var dry, real, errb bytes.Buffer
	args := []string{"prune", "--older-than", "720h", "--agents-older-than", "168h"}
	if code := run(append(args, "--dry-run"), env, &dry, &errb); code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errb.String())
	}
	if code := run(args, env, &real, &errb); code != 0 {
		t.Fatalf("prune: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{": 4 runs, 0 events, 0 messages, 0 answer requests, 4 threads", ": 1 agents, 0 providers"} {
		if !strings.Contains(real.String(), want) {
			t.Fatalf("prune printed %q; want %q", real.String(), want)
		}
		if !strings.Contains(dry.String(), want) {
			t.Errorf("the dry run printed %q, the prune then %q", dry.String(), real.String())
		}
	}
}
