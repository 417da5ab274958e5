package a2a_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/functions/a2a"
)

// A cold door's storage trouble answers the id a call names and no other:
// a string id as sent, null for a batch, a notification, an id that is
// not a string or number, or a body that is not JSON (JSON-RPC 2.0 §5) —
// never an id taken from inside a batch or from params — and the error
// says nothing of the storage behind it (D13: no driver message).
func TestOutsideColdDoorEchoesOnlyTheCallsID(t *testing.T) {
	c, stuck := coldDoorClient(t)
	for _, tc := range []struct{ name, body, id string }{
		{"string id", `{"jsonrpc":"2.0","id":"call-\u00e9","method":"tasks/get","params":{"id":"run_x"}}`, `"call-é"`},
		{"batch", `[{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"id":"run_x"}}]`, `null`},
		{"notification", `{"jsonrpc":"2.0","method":"tasks/get","params":{"id":7}}`, `null`},
		{"object id", `{"jsonrpc":"2.0","id":{"id":7},"method":"tasks/get"}`, `null`},
		{"not JSON", `{"jsonrpc":"2.0","id":7,`, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, cancel := c.post(tc.body, nil)
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
			if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(b, &r) != nil || r.JSONRPC != "2.0" ||
				!sameID(r.ID, tc.id) || r.Error == nil || r.Error.Code != a2a.CodeUnavailable {
				t.Fatalf("answered %d %s, want 503 and a JSON-RPC response to id %s with error %d", resp.StatusCode, b, tc.id, a2a.CodeUnavailable)
			}
			host, _, _ := strings.Cut(stuck, ":")
			for _, leak := range []string{stuck, host, "postgres", "dial", "timeout", "deadline", "pgx", "funduq?"} {
				if strings.Contains(strings.ToLower(string(b)), leak) {
					t.Errorf("the answer names %q: %s", leak, b)
				}
			}
		})
	}
}

// sameID reports whether raw and want are the same JSON value ("\u00e9"
// and "é" are one string).
func sameID(raw json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && reflect.DeepEqual(a, b)
}
