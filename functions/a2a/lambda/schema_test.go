package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/lambdatest"
)

// A cold start over a database nobody migrated answers a JSON-RPC call as
// this door answers storage trouble: 503 with Retry-After and a JSON-RPC
// response to the call's id, error -32043, reason schema_not_migrated.
// (On main: 200 with error -32603 "internal error".)
func TestLambdaOverAnUnmigratedDatabase(t *testing.T) {
	handler := lambdatest.StartUnmigrated(t, newHandler, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	path := "/a2a/" + strings.Repeat("ab", 32) + "/echo"
	resp, err := door.WrapAPIGateway(handler, nil)(ctx, &events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: path,
		Body:           `{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"id":"run_x"}}`,
		Headers:        map[string]string{"content-type": "application/json"},
		RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: "POST", Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code int
			Data struct{ Reason string }
		}
	}
	if json.Unmarshal(b, &r) != nil || resp.StatusCode != 503 || resp.Headers["Retry-After"] == "" || string(r.ID) != "7" ||
		r.Error == nil || r.Error.Code != a2a.CodeUnavailable || r.Error.Data.Reason != "schema_not_migrated" {
		t.Fatalf("tasks/get: %d %v %s; want 503 with Retry-After, a JSON-RPC answer to id 7 with error %d, reason schema_not_migrated",
			resp.StatusCode, resp.Headers, b, a2a.CodeUnavailable)
	}
}
