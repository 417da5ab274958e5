package agui_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// Walking GET /agents with ?after= while agents are recorded, hidden for
// age and deleted between pages: every agent present throughout is listed
// exactly once, and none twice, whatever its name's case, punctuation or
// prefix of another's (the order and the cursor are both PostgreSQL's).
func TestAgentsWalkWhileTheListChanges(t *testing.T) {
	h := nodetest.Start(t, nil)
	ctx := context.Background()
	keys := []string{fmt.Sprintf("%064x", 1), fmt.Sprintf("%064x", 2), fmt.Sprintf("%064x", 3)}
	names := []string{"A", "Aa", "B", "Z", "_", "_a", "-", "-a", "0", "9", "a", "a-", "a_", "a0", "aA", "aa", "aaa", "ab", "b", "z"}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := h.DB().Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		exec(`INSERT INTO providers (public_key, fingerprint) VALUES ($1, $2)`, k, fmt.Sprintf("%016x", i+1))
	}
	add := func(k, n string) {
		exec(`INSERT INTO agents (provider_key, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, k, n)
	}
	for _, k := range keys[:2] {
		for _, n := range names {
			add(k, n)
		}
	}
	srv := startDoor(t, h, nil)
	throughout := map[string]bool{}
	for _, k := range keys[:2] {
		for _, n := range names {
			throughout[k+"/"+n] = true
		}
	}
	seen := map[string]int{}
	after := ""
	for step := 0; ; step++ {
		q := "limit=3"
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		p := getAgents(t, srv.URL+"/agents?"+q)
		if p.Status != 200 {
			t.Fatalf("page %d: %d %s", step, p.Status, p.Body)
		}
		for _, id := range p.Agents {
			seen[id]++
		}
		// Between pages: a name recorded on each key (before and after
		// the cursor), one hidden for age, one deleted, a key added.
		extra := fmt.Sprintf("n%d", step)
		add(keys[0], extra)
		add(keys[1], "A"+extra)
		add(keys[2], extra)
		if step < len(names) {
			victim := names[len(names)-1-step]
			delete(throughout, keys[1]+"/"+victim)
			delete(throughout, keys[0]+"/"+names[step])
			exec(`UPDATE agents SET last_seen_at = now() - interval '30 days', unserved_since = now() - interval '30 days', served_epoch = NULL
				WHERE provider_key = $1 AND name = $2`, keys[1], victim)
			exec(`DELETE FROM agents WHERE provider_key = $1 AND name = $2`, keys[0], names[step])
		}
		if !p.More {
			break
		}
		after = p.After
		if step > 500 {
			t.Fatal("paging does not end")
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s listed %d times", id, n)
		}
	}
	for id := range throughout {
		if seen[id] != 1 {
			t.Errorf("%s, present throughout, listed %d times", id, seen[id])
		}
	}
}
