package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.MainWithPools(m)
}

// invoke calls the Lambda entry as the Function URL runtime would, with
// the invocation's deadline on the context, and returns status, headers and
// the whole streamed body.
func invoke(t *testing.T, h http.Handler, deadline time.Time, req *events.APIGatewayProxyRequest) (int, map[string]string, string) {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := door.WrapAPIGateway(h, nil)(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Headers, string(b)
}

func get(path string, hdr map[string]string) *events.APIGatewayProxyRequest {
	return &events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: path, Headers: hdr,
		RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: "GET", Path: path}}
}

// Through the Function URL wrapper: a run's events stream out and the
// stream ends after the terminal event; a stream still open when the
// invocation's deadline nears ends early with the reconnect comment.
func TestLambdaEntry(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	handler, closeFn, err := newHandler(config.Door{Storage: h.Cfg.Storage, Identity: h.Cfg.Identity}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)

	code, hdr, body := invoke(t, handler, time.Now().Add(time.Minute), get("/agents", nil))
	if code != 200 || !strings.Contains(body, `"name":"echo"`) || !strings.HasPrefix(hdr["Content-Type"], "application/json") {
		t.Fatalf("agents: %d %v %s", code, hdr, body)
	}

	runID, threadID := h.Door(p.Key, "echo", "", "hi")
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(runID, threadID)
	h.WaitStatus(runID, run.Completed)
	code, hdr, body = invoke(t, handler, time.Now().Add(time.Minute), get("/runs/"+runID+"/events", nil))
	if code != 200 || hdr["Content-Type"] != "text/event-stream" || strings.Count(body, "\ndata: ") != 5 ||
		!strings.Contains(body, "id: 5\ndata: {\"type\":\"RUN_FINISHED\"") {
		t.Fatalf("events: %d %v %s", code, hdr, body)
	}

	// A held run that says nothing: the deadline (less the margin) ends it.
	runID2, _ := h.Door(p.Key, "echo", threadID, "again")
	f = p.Offer()
	p.Accept(f.RunID)
	p.Event(runID2, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, threadID, runID2))
	h.Eventually("event stored", func() bool { return len(h.Events(runID2)) == 1 })
	code, _, body = invoke(t, handler, time.Now().Add(3500*time.Millisecond), get("/runs/"+runID2+"/events", nil))
	sc := bufio.NewScanner(strings.NewReader(body))
	var lines []string
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			lines = append(lines, l)
		}
	}
	if code != 200 || len(lines) < 2 || !strings.Contains(lines[len(lines)-2], "reconnect with GET /runs/"+runID2+"/events and Last-Event-ID: 1") ||
		!strings.HasPrefix(lines[len(lines)-1], `data: {"type":"CUSTOM","name":"funduq.stream_ended"`) {
		t.Fatalf("deadline: %d %q", code, body)
	}
}

// The authorizer seat is the key the API Gateway authorizer put in
// requestContext.authorizer, and nothing a client sends: the old
// authenticated-key header is not believed, with or without an authorizer.
func TestAuthorizedKey(t *testing.T) {
	key := strings.Repeat("ab", 32)
	var seen []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = append(seen, authorizedKey(r)) })
	req := get("/x", map[string]string{"X-Funduq-Authenticated-Key": key, "funduqKey": key})
	invoke(t, h, time.Now().Add(time.Minute), req)
	req.RequestContext.Authorizer = map[string]any{"principalId": "k", "funduqKey": key}
	invoke(t, h, time.Now().Add(time.Minute), req)
	req.RequestContext.Authorizer = map[string]any{"principalId": "k", "funduqKey": "not-a-key"}
	invoke(t, h, time.Now().Add(time.Minute), req)
	if len(seen) != 3 || seen[0] != "" || seen[1] != key || seen[2] != "" {
		t.Fatalf("seats %q", seen)
	}
}

// doorOn is this Lambda's handler over h's storage, reading the live feed
// under the node's Redis prefix as a deployed door does (RedisPrefix is
// the same on both stacks); it is closed when the test ends.
func doorOn(t *testing.T, h *nodetest.Harness) http.Handler {
	t.Helper()
	st := h.Cfg.Storage
	st.RedisPrefix = h.Prefix
	handler, closeFn, err := newHandler(config.Door{Storage: st, Identity: h.Cfg.Identity}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return handler
}
