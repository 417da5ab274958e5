package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

// A JSON-RPC caller behind the authorizer whose body is not the one its
// presenter signature covers (the authorizer bound the key to another
// body's digest) is refused before the door, as it always was — but in
// the door's own envelope: a JSON-RPC response to the call's id, error
// -32040 (the door's word for a presenter proof that does not hold), data
// reason presenter_body_mismatch, HTTP 401; nothing written. On main it
// was the AG-UI envelope ({"error":{"code":"presenter_body_mismatch"}}, no
// "jsonrpc", no id), which @a2a-js/sdk reads as a bare "HTTP error …
// Status: 401" and no A2A client can match to its call (design.md §The
// doors: a refusal made in front of the door is answered in the door's
// envelope, as door.SchemaGate's is).
func TestOutsideBodyOtherThanTheSignedOneIsAJSONRPCRefusal(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	handler := doorOn(t, h)
	caller, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xc3))
	if err != nil {
		t.Fatal(err)
	}
	path := "/a2a/" + p.Key + "/echo"
	signed := `{"jsonrpc":"2.0","id":"s-1","method":"message/send","params":{"message":{"kind":"message","messageId":"m-1","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`
	var runs int
	if err := h.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, version, body, id string }{
		{"0.3 send", "", strings.Replace(signed, `"hi"`, `"bye"`, 1), `"s-1"`},
		{"1.0 send", "1.0", `{"jsonrpc":"2.0","id":42,"method":"SendMessage","params":{"message":{"messageId":"m-2","role":"ROLE_USER","parts":[{"text":"bye"}]}}}`, "42"},
		{"0.3 stream", "", `{"jsonrpc":"2.0","id":7,"method":"message/stream","params":{"message":{"kind":"message","messageId":"m-3","role":"user","parts":[{"kind":"text","text":"bye"}]}}}`, "7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			hdr := map[string]string{"content-type": "application/json", "host": "door.example"}
			if tc.version != "" {
				hdr[a2a.VersionHeader] = tc.version
			}
			ev := &events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: path, Body: tc.body, Headers: hdr,
				RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: "POST", Path: path,
					Authorizer: map[string]any{door.AuthorizerKeyField: caller.PublicKeyHex(),
						door.AuthorizerBodyField: identity.SHA256Hex([]byte(signed))}}}
			resp, err := door.WrapAPIGateway(handler, nil)(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			var r struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Result  json.RawMessage `json:"result"`
				Error   *struct {
					Code    int
					Message string
					Data    struct{ Reason string }
				}
			}
			if resp.StatusCode != 401 || !strings.HasPrefix(resp.Headers["Content-Type"], "application/json") ||
				json.Unmarshal(b, &r) != nil || r.JSONRPC != "2.0" || string(r.ID) != tc.id || r.Result != nil ||
				r.Error == nil || r.Error.Code != a2a.CodeUnauthenticated || r.Error.Message == "" ||
				r.Error.Data.Reason != door.CodeBodyMismatch {
				t.Fatalf("another body than the signed one: %d %v %s; want 401 and a JSON-RPC answer to id %s with error %d, reason %s",
					resp.StatusCode, resp.Headers, b, tc.id, a2a.CodeUnauthenticated, door.CodeBodyMismatch)
			}
		})
	}
	var after int
	if err := h.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != runs {
		t.Fatalf("refusals wrote runs: %d → %d", runs, after)
	}
	p.None()
}
