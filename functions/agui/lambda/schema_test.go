package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/internal/lambdatest"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// A cold start over a database nobody migrated answers every request 503
// schema_not_migrated with Retry-After, telling the caller no more than
// that the service is not ready; the log's ERROR line names the version
// and what to run. (On main: 500 internal "internal error" on every
// request, the log saying only relation "agents" does not exist.)
func TestLambdaOverAnUnmigratedDatabase(t *testing.T) {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	handler := lambdatest.StartUnmigrated(t, newHandler, log)
	post := &events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: "/agui/" + strings.Repeat("ab", 32) + "/echo",
		Body: `{"threadId":"t","runId":"r","messages":[{"id":"m","role":"user","content":"hi"}]}`, Headers: map[string]string{"content-type": "application/json"},
		RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: "POST", Path: "/agui/x/echo"}}
	for _, req := range []*events.APIGatewayProxyRequest{get("/agents", nil), get("/threads/thr_x", nil), post} {
		code, hdr, body := invoke(t, handler, time.Now().Add(time.Minute), req)
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal([]byte(body), &e)
		if code != 503 || hdr["Retry-After"] == "" || e.Error.Code != "schema_not_migrated" ||
			strings.Contains(e.Error.Message, "migrate") || strings.Contains(e.Error.Message, "version") {
			t.Errorf("%s %s: %d %v %s; want 503 schema_not_migrated with Retry-After, saying only that the service is not ready",
				req.HTTPMethod, req.Path, code, hdr, body)
		}
	}
	var named bool
	for line := range bytes.Lines(logs.Bytes()) {
		if bytes.Contains(line, []byte(`"level":"ERROR"`)) && bytes.Contains(line, []byte("at version 0, this binary needs")) &&
			bytes.Contains(line, []byte("run `broker-node migrate`")) {
			named = true
		}
	}
	if !named {
		t.Errorf("no ERROR line naming the version and `broker-node migrate`:\n%s", logs.Bytes())
	}
}
