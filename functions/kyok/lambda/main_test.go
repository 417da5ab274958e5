package main

import (
	"context"
	"encoding/json"
	"io"
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

// Through the Function URL wrapper, the KYOK entry is the KYOK door on
// real connections: it answers with the door's own OpenAI-style error
// envelope (a GET is refused with Allow: POST, a completion without a
// valid KYOK token with invalid_token), so an agent pointed at the
// deployed KyokUrl hears why it was turned away. Streamed completions go
// through the same adapter as the AG-UI door's SSE (functions/agui/lambda)
// and are covered end to end in functions/kyok.
func TestLambdaEntry(t *testing.T) {
	h := nodetest.Start(t, nil)
	st := h.Cfg.Storage
	st.RedisPrefix = h.Prefix
	handler, closeFn, err := door.NewLambdaHandler(config.Door{Storage: st, Identity: h.Cfg.Identity}, nil, build)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	invoke := func(method, body string, hdr map[string]string) (int, map[string]string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const path = "/kyok/v1/chat/completions"
		resp, err := door.WrapAPIGateway(handler, nil)(ctx, &events.APIGatewayProxyRequest{HTTPMethod: method, Path: path, Body: body, Headers: hdr,
			RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: method, Path: path}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Headers, string(b)
	}
	code := func(body string) string {
		var e struct{ Error struct{ Code string } }
		_ = json.Unmarshal([]byte(body), &e)
		return e.Error.Code
	}

	if st, hdr, body := invoke("GET", "", nil); st != 405 || hdr["Allow"] != "POST" || code(body) != "method_not_allowed" {
		t.Errorf("GET: %d %v %s", st, hdr, body)
	}
	st2, hdr, body := invoke("POST", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		map[string]string{"content-type": "application/json", "authorization": "Bearer not-a-token"})
	if st2 != 401 || hdr["Content-Type"] != "application/json" || code(body) != "invalid_token" {
		t.Errorf("POST with a bad token: %d %v %s", st2, hdr, body)
	}
}
