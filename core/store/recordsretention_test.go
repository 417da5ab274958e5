package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// keyOf is the public key of the test seed b.
func keyOf(t *testing.T, b byte) string {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(strings.Repeat(fmt.Sprintf("%02x", b), 32))
	if err != nil {
		t.Fatal(err)
	}
	return s.PublicKeyHex()
}

// A stranger's keys left a providers row each and an agents row per name
// for ever, read over by every GET /agents page. Records retention deletes
// the agents nobody has served since before the cutoff and no thread or
// run names, and the providers rows left with nothing, in batches of keys;
// an agent served now, one with a conversation, one served recently, one
// expected back, and a key's quality counters stay, and the listing of
// honest agents is what it was.
func TestPruneUnservedRecords(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-10 * 24 * time.Hour)
	recent := time.Now().Add(-2 * 24 * time.Hour)
	// agent records key/name, last registered and gone unserved at at.
	agent := func(key, name string, at time.Time) {
		t.Helper()
		storetest.Agent(t, st, key, name)
		exec(`UPDATE agents SET last_seen_at = $3, joined_at = $3, unserved_since = $3, served_epoch = NULL
			WHERE provider_key = $1 AND name = $2`, key, name, at)
		exec(`UPDATE providers SET first_seen_at = $2, updated_at = $2 WHERE public_key = $1`, key, at)
	}
	var strangers []string
	for i := range 5 {
		k := keyOf(t, byte(0x10+i))
		strangers = append(strangers, k)
		for j := range 3 {
			agent(k, fmt.Sprint("s", j), old)
		}
	}
	bare := keyOf(t, 0x20) // a key whose register named no agent
	agent(bare, "x", old)
	exec(`DELETE FROM agents WHERE provider_key = $1`, bare)

	served := keyOf(t, 0x30) // registered long ago, served now
	agent(served, "live", old)
	exec(`UPDATE agents SET served_epoch = 1, unserved_since = NULL WHERE provider_key = $1`, served)
	talked := keyOf(t, 0x31) // unserved long ago, with a conversation
	agent(talked, "chat", old)
	if _, _, err := st.CreateRun(ctx, store.NewRun{RunID: run.NewRunID(), ThreadID: run.NewThreadID(), ProviderKey: talked,
		AgentName: "chat", RunInput: []byte(`{}`), CreateThread: &store.NewThread{}}); err != nil {
		t.Fatal(err)
	}
	agent(talked, "quiet", old) // the same key's agent with none: goes, the key stays
	lately := keyOf(t, 0x32)    // served two days ago
	agent(lately, "echo", recent)
	back := keyOf(t, 0x33) // its link lost long ago, yet expected back
	agent(back, "echo", old)
	exec(`UPDATE agents SET back_until = now() + interval '1 hour' WHERE provider_key = $1`, back)
	counted := keyOf(t, 0x34) // quality counters: its agents go, its key stays
	agent(counted, "echo", old)
	exec(`INSERT INTO provider_quality (provider_key, abandoned) VALUES ($1, 2)`, counted)

	listing := func() []string {
		t.Helper()
		page, err := st.AgentsPage(ctx, store.AgentPageQuery{HiddenAfter: 7 * 24 * time.Hour, Limit: 500, MaxBytes: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range page.Agents {
			out = append(out, a.ProviderKey[:8]+"/"+a.Name)
		}
		return out
	}
	before := listing()

	cutoff := time.Now().Add(-7 * 24 * time.Hour)
	preview, err := st.PruneRecordsPreview(ctx, cutoff, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var total store.PrunedRecords
	after, batches := "", 0
	for {
		p, err := st.PruneRecordsBatch(ctx, cutoff, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		batches++
		total.Agents += p.Agents
		total.Providers += p.Providers
		if p.Done {
			break
		}
		after = p.Next
	}
	// 15 strangers' agents, talked's quiet, counted's echo; the five
	// strangers' keys and the bare key.
	if total.Agents != 17 || total.Providers != 6 {
		t.Fatalf("deleted %d agents and %d providers, want 17 and 6", total.Agents, total.Providers)
	}
	if preview.Agents != total.Agents || preview.Providers != total.Providers {
		t.Fatalf("preview %+v, deleted %+v", preview, total)
	}
	if batches < 4 {
		t.Fatalf("%d batches for 12 keys by 3", batches)
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := st.Pool().QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, k := range append(strangers, bare) {
		if n := count(`SELECT count(*) FROM providers WHERE public_key = $1`, k); n != 0 {
			t.Fatalf("stranger %s… kept", k[:8])
		}
	}
	for _, a := range []struct{ key, name string }{{served, "live"}, {talked, "chat"}, {lately, "echo"}, {back, "echo"}} {
		if n := count(`SELECT count(*) FROM agents WHERE provider_key = $1 AND name = $2`, a.key, a.name); n != 1 {
			t.Fatalf("agent %s…/%s deleted", a.key[:8], a.name)
		}
	}
	for _, k := range []string{served, talked, lately, back, counted} {
		if n := count(`SELECT count(*) FROM providers WHERE public_key = $1`, k); n != 1 {
			t.Fatalf("provider %s… deleted", k[:8])
		}
	}
	if got := listing(); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Fatalf("the listing changed: %v, was %v", got, before)
	}

	// Nothing is left to delete: a second pass deletes nothing.
	p, err := st.PruneRecordsBatch(ctx, cutoff, "", 100)
	if err != nil || p.Agents != 0 || p.Providers != 0 || !p.Done {
		t.Fatalf("second pass: %+v %v", p, err)
	}
}
