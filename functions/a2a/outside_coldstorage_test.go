package a2a_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/testservers"
)

// A door that has not yet read the agent (a cold Lambda, a restarted
// process) while PostgreSQL hangs answers every JSON-RPC method as it
// answers storage trouble anywhere else on this door (design.md §Doors
// under storage faults): 503 with Retry-After and a JSON-RPC response
// naming the request's id with error -32043 — not the REST envelope of
// the other doors, which a JSON-RPC client cannot read as an answer to its
// call. (An unknown agent stays a plain 404 before any JSON-RPC
// processing: that is the agent's absence, not storage trouble.)
func TestOutsideColdDoorAnswersStorageTroubleInJSONRPC(t *testing.T) {
	c, _ := coldDoorClient(t)
	for _, tc := range []struct {
		method string
		params any
	}{
		{"message/send", map[string]any{"message": c.message("m1", "hi", nil)}},
		{"message/stream", map[string]any{"message": c.message("m2", "hi", nil)}},
		{"tasks/get", map[string]any{"id": "run_x"}},
		{"tasks/cancel", map[string]any{"id": "run_x"}},
		{"tasks/resubscribe", map[string]any{"id": "run_x"}},
	} {
		t.Run(tc.method, func(t *testing.T) {
			body := c.body(tc.method, tc.params)
			resp, cancel := c.post(body, nil)
			defer cancel()
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var r struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   *struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			err := json.Unmarshal(b, &r)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("%s: %d Retry-After %q: %s, want 503 with Retry-After", tc.method, resp.StatusCode, resp.Header.Get("Retry-After"), b)
			}
			if err != nil || r.JSONRPC != "2.0" || string(r.ID) != jsonID(t, body) || r.Error == nil || r.Error.Code != a2a.CodeUnavailable {
				t.Fatalf("%s: answered %s, want a JSON-RPC response to id %s with error %d", tc.method, b, jsonID(t, body), a2a.CodeUnavailable)
			}
		})
	}
}

// jsonID is a JSON-RPC request's id as sent.
func jsonID(t *testing.T, body string) string {
	t.Helper()
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	return string(req.ID)
}

// coldDoorClient is a caller of a door that has read nothing yet (a cold
// Lambda) and whose PostgreSQL hangs (connections accepted, never
// answered, at stuck); its Redis answers.
func coldDoorClient(t *testing.T) (c *client, stuck string) {
	t.Helper()
	_, prefix := redistest.Client(t)
	stuck = testservers.Stuck(t)
	deps, err := door.Connect(config.Door{
		Storage:  config.Storage{DatabaseURL: "postgres://postgres@" + stuck + "/funduq?sslmode=disable", RedisURL: redistest.URL()},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
	}, door.ConnectOptions{RedisPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return newClient(t, startDoorWith(t, deps, nil), nodetest.SeedHex(0x33), "echo", ""), stuck
}
