package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/store/storetest"
)

// stepDownTo14 is what `goose down-to 14` does to a database at 00018:
// each migration's Down section, newest first, and its version row.
var stepDownTo14 = []string{
	`DROP INDEX CONCURRENTLY IF EXISTS runs_failed_idx`,
	`ALTER TABLE broker_leader DROP COLUMN funduq_key`,
	`ALTER TABLE runs DROP COLUMN holding_counted`,
	`ALTER TABLE threads DROP COLUMN IF EXISTS cursor_key`,
	`DELETE FROM goose_db_version WHERE version_id > 14`,
}

// Doors started over a migrated database, then the schema stepped down
// under them (the rollback README "The schema" describes, run before the
// doors were rolled back): each request that meets a table or column the
// doors need and the database no longer has (here, a thread row's
// cursor_key: every read of a thread) is answered as a door started
// cold over that schema answers every request — 503 schema_not_migrated
// with Retry-After in the door's envelope (A2A: JSON-RPC -32043 to the
// call's id) — telling the caller to come back, not that funduq failed.
// On main each was 500 internal (A2A -32603 "internal error"), a bug
// report for an operator's order of steps (design.md §The doors, "The
// doors need the migrated schema").
func TestOutsideWarmDoorsOverASteppedDownSchema(t *testing.T) {
	u := storetest.URL(t)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := strings.Repeat("ab", 32)
	for _, q := range []string{
		`INSERT INTO providers (public_key, fingerprint) VALUES ('` + key + `', '` + key[:16] + `')`,
		`INSERT INTO agents (provider_key, name) VALUES ('` + key + `', 'echo')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	base, _ := serveDoors(t, doorsEnv(u), io.Discard)
	const thread = "thread_000000000000000000000000"
	aguiBody := `{"threadId":"` + thread + `","runId":"r-1","messages":[{"id":"m1","role":"user","content":"hi"}],"tools":[],"context":[],"state":null,"forwardedProps":{}}`
	getTask := `{"jsonrpc":"2.0","id":"g-1","method":"tasks/get","params":{"id":"run_000000000000000000000000"}}`
	send := `{"jsonrpc":"2.0","id":5,"method":"message/send","params":{"message":{"kind":"message","messageId":"m-1","contextId":"` + thread + `","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`
	list := `{"jsonrpc":"2.0","id":"l-1","method":"ListTasks","params":{"contextId":"` + thread + `"}}`

	// Warm: every door has answered a request over the migrated schema.
	if c, b := call(t, "GET", base+"/threads/"+thread, ""); c != http.StatusNotFound {
		t.Fatalf("warm thread read: %d %s", c, b)
	}
	if c, b := call(t, "POST", base+"/a2a/"+key+"/echo", getTask); c != http.StatusOK || !strings.Contains(b, `"code":-32001`) {
		t.Fatalf("warm tasks/get: %d %s", c, b)
	}
	for _, q := range stepDownTo14 {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("step down: %s: %v", q, err)
		}
	}

	envelope := func(t *testing.T, what string, resp *http.Response, b []byte) {
		t.Helper()
		var env struct {
			Error struct{ Code, Message string }
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			json.Unmarshal(b, &env) != nil || env.Error.Code != "schema_not_migrated" {
			t.Errorf("%s over a stepped-down schema: %d Retry-After %q %s; want 503 schema_not_migrated with Retry-After",
				what, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	rpc := func(t *testing.T, what, id string, resp *http.Response, b []byte) {
		t.Helper()
		var r struct {
			ID    json.RawMessage
			Error *struct {
				Code int
				Data struct{ Reason string }
			}
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			json.Unmarshal(b, &r) != nil || string(r.ID) != id || r.Error == nil || r.Error.Code != -32043 ||
			r.Error.Data.Reason != "schema_not_migrated" {
			t.Errorf("%s over a stepped-down schema: %d Retry-After %q %s; want 503 with Retry-After, a JSON-RPC answer to id %s, error -32043, reason schema_not_migrated",
				what, resp.StatusCode, resp.Header.Get("Retry-After"), b, id)
		}
	}
	do := func(method, path, body string) (*http.Response, []byte) {
		rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer rcancel()
		req, _ := http.NewRequestWithContext(rctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	t.Run("GET /threads", func(t *testing.T) {
		resp, b := do("GET", "/threads/"+thread, "")
		envelope(t, "a thread read", resp, b)
	})
	t.Run("AG-UI turn on a funduq thread", func(t *testing.T) {
		resp, b := do("POST", "/agui/"+key+"/echo", aguiBody)
		envelope(t, "an AG-UI turn", resp, b)
	})
	t.Run("A2A message/send on a context", func(t *testing.T) {
		resp, b := do("POST", "/a2a/"+key+"/echo", send)
		rpc(t, "message/send", "5", resp, b)
	})
	t.Run("A2A ListTasks", func(t *testing.T) {
		resp, b := do("POST", "/a2a/"+key+"/echo?A2A-Version=1.0", list)
		rpc(t, "ListTasks", `"l-1"`, resp, b)
	})
	var runs int
	if err := db.QueryRow(`SELECT count(*) FROM runs`).Scan(&runs); err != nil || runs != 0 {
		t.Fatalf("runs written over the stepped-down schema: %d (%v)", runs, err)
	}
}
