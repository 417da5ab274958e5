package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.MainWithPools(m)
}

// Through the Function URL wrapper: the agent card names the door by the
// invocation's host, and a blocking send answers a completed task.
func TestLambdaEntry(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	handler, closeFn, err := newHandler(config.Door{Storage: h.Cfg.Storage, Identity: h.Cfg.Identity}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	invoke := func(method, path, body string, hdr map[string]string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if hdr == nil {
			hdr = map[string]string{}
		}
		hdr["host"] = "door.example"
		resp, err := door.WrapAPIGateway(handler, nil)(ctx, &events.APIGatewayProxyRequest{HTTPMethod: method, Path: path, Body: body, Headers: hdr,
			RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: method, Path: path}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, card := invoke("GET", "/a2a/"+p.Key+"/echo/.well-known/agent-card.json", "", map[string]string{"x-forwarded-proto": "https"})
	if code != 200 || !strings.Contains(card, `"url":"https://door.example/a2a/`) {
		t.Fatalf("card %d %s", code, card)
	}
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
	}()
	code, body := invoke("POST", "/a2a/"+p.Key+"/echo",
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`,
		map[string]string{"content-type": "application/json"})
	var resp struct {
		Result struct {
			Status struct{ State string }
		}
	}
	if code != 200 || json.Unmarshal([]byte(body), &resp) != nil || resp.Result.Status.State != "completed" {
		t.Fatalf("send %d %s", code, body)
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
