package kyok_test

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/door"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
)

// A streamed completion still going when the door's Lambda invocation
// nears its end (an LLM that writes for longer than the function may run)
// ends before the function is killed with the relay's typed failure as
// its last event, as a relay lost mid-completion does: the calling agent's
// OpenAI client raises it. Before, the door waited for the next chunk
// until the deadline itself and wrote nothing: the stream was cut with no
// [DONE] and no error, and the agent took a truncated answer for the whole
// one.
func TestOutsideCompletionEndsBeforeTheLambdaDeadlineWithAnError(t *testing.T) {
	e := newEnv(t, 0)
	a := e.connectAgent(0x17, "translator")
	l := e.attachLLM(0x47, "gpt-4")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, "")
	// The LLM answers one chunk, then keeps writing past the invocation.
	l.onRequest(func(l *llm, req wire.KyokCompletionRequest) {
		l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: chunkJSON("chatcmpl-1", "Bonjour", "")})
	})
	h, err := kyokdoor.New(kyokdoor.Options{Store: e.H.Store, Redis: e.rdb, Prefix: e.H.Prefix,
		TokenSecret: []byte(secret), AckTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// invoke is one Lambda invocation of the door ending at deadline (the
	// door's input, not an assertion: it ends the call
	// door.DefaultDeadlineMargin before), read to its end.
	invoke := func(body string) (int, map[string]string, []byte) {
		t.Helper()
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(door.DefaultDeadlineMargin+4*time.Second))
		defer cancel()
		ts := time.Now().Unix()
		resp, err := door.WrapAPIGateway(h, nil)(ctx, &events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: kyokdoor.Path,
			Body: body, Headers: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + token,
				kyokdoor.HeaderTimestamp: strconv.FormatInt(ts, 10),
				kyokdoor.HeaderSignature: a.signer.Sign(identity.KyokCallPayload(token, ts, []byte(body)))},
			RequestContext: events.APIGatewayProxyRequestContext{DomainName: "api.example", Stage: "v1", HTTPMethod: "POST",
				Path: "/v1" + kyokdoor.Path}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Headers, b
	}
	code, _, b := invoke(streamBody)
	var data []string
	for _, line := range strings.Split(string(b), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
	if code != 200 || len(data) != 2 || !strings.Contains(data[0], "Bonjour") ||
		!strings.HasPrefix(data[1], `{"error":`) || !strings.Contains(data[1], `"type":"funduq_relay_failed"`) {
		t.Fatalf("a completion going on past the invocation: %d\n%s\nwant the chunk, then the relay's typed failure as the last event",
			code, b)
	}

	// Not streamed: the answer is held until it ends, so the call is
	// refused (504, the door's own limit) instead of cut.
	code, hdr, b := invoke(`{"model":"gpt-4","messages":[{"role":"user","content":"hi"}]}`)
	if c, _ := errorCode(t, b); code != 504 || c != "deadline_reached" || !strings.HasPrefix(hdr["Content-Type"], "application/json") {
		t.Fatalf("a collapsed completion going on past the invocation: %d %v %s, want 504 deadline_reached", code, hdr, b)
	}
}
