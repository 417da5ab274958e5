package kyok_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

func client(e *env, a *agent, token string) openai.Client {
	return openai.NewClient(option.WithBaseURL(e.DoorURL+"/kyok/v1/"), option.WithAPIKey(token),
		option.WithMaxRetries(0), option.WithMiddleware(signer(a.signer, token)))
}

func params() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "gpt-4",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
}

// The acceptance: the official OpenAI Go SDK, pointed at the KYOK door,
// streaming and not, receives the LLM provider's chunks in order; the LLM
// provider sees the proven agent, the bound offering and the caller's context.
func TestOpenAIClientStreamingAndNot(t *testing.T) {
	e := newEnv(t, 0)
	l := e.attachLLM(0x41, "gpt-4", "claude")
	l.onRequest(streamAnswer("Hel", "lo, ", "world"))
	a := e.connectAgent(0x11, "translator")
	runID, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, `{"voucher":"v-1"}`)
	c := client(e, a, token)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()

	t.Run("stream", func(t *testing.T) {
		s := c.Chat.Completions.NewStreaming(ctx, params())
		var got []string
		for s.Next() {
			ch := s.Current()
			if len(ch.Choices) > 0 {
				got = append(got, ch.Choices[0].Delta.Content)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"Hel", "lo, ", "world"}) {
			t.Fatalf("chunks %q", got)
		}
		req := l.request()
		if req.RunID != runID || req.ProviderKey != a.Key || req.AgentName != "translator" || req.LLMName != "gpt-4" ||
			string(req.Context) != `{"voucher":"v-1"}` || string(req.ActorChain) != "null" {
			t.Fatalf("completionRequest %+v", req)
		}
		if !strings.HasPrefix(req.RequestID, "kyokreq_") || len(req.RequestID) != len("kyokreq_")+24 {
			t.Fatalf("requestId %q", req.RequestID)
		}
		var body map[string]any
		_ = json.Unmarshal(req.Body, &body)
		if body["model"] != "gpt-4" || body["stream"] != true {
			t.Fatalf("body %s", req.Body)
		}
	})
	t.Run("collapsed", func(t *testing.T) {
		res, err := c.Chat.Completions.New(ctx, params())
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 1 || res.Choices[0].Message.Content != "Hello, world" ||
			res.Choices[0].FinishReason != "stop" || res.Choices[0].Message.Role != "assistant" ||
			res.ID != "chatcmpl-1" || res.Model != "gpt-4" || res.Object != "chat.completion" {
			t.Fatalf("completion %s", res.RawJSON())
		}
		l.request()
	})
	t.Run("sse framing", func(t *testing.T) {
		code, b := e.call(signedCall{token: token, signer: a.signer,
			body: `{"model":"gpt-4","stream":true,"messages":[{"role":"user","content":"hi"}]}`})
		if code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
		if len(events) != 4 || events[3] != "data: [DONE]" {
			t.Fatalf("events %q", events)
		}
		// Nulls dropped: the first chunk's finish_reason null is gone.
		if strings.Contains(events[0], "null") || !strings.Contains(events[0], `"content":"Hel"`) {
			t.Fatalf("first event %s", events[0])
		}
		l.request()
	})
	// Counted after the answer is relayed, so wait for it.
	eventually(t, "three completions counted", func() bool {
		q := e.H.Quality(l.Key)
		return q.Completions == 3 && q.Refused == 0 && q.Failed == 0
	})
}

// Every refusal, one by one, in the door's order.
func TestRefusals(t *testing.T) {
	e := newEnv(t, 0)
	l := e.attachLLM(0x41, "gpt-4")
	l.onRequest(streamAnswer("ok"))
	a := e.connectAgent(0x11, "translator")
	other := e.connectAgent(0x12, "spy")
	ref := kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}
	runID, threadID, token := e.startRun(a, ref, "")
	const body = `{"model":"gpt-4","messages":[{"role":"user","content":"hi"}]}`
	old := time.Now().Unix() - 120
	future := time.Now().Unix() + 120
	type tc struct {
		name string
		c    signedCall
		code int
		want string
	}
	for _, x := range []tc{
		{"bad token", signedCall{token: token + "0", body: body, signer: a.signer}, 401, "invalid_token"},
		{"expired token", signedCall{token: identity.MintKyokToken([]byte(secret),
			identity.NewKyokClaims(runID, a.Key, a.Name, time.Now().Add(-2*time.Hour))), body: body, signer: a.signer}, 401, "invalid_token"},
		{"another agent's token", signedCall{token: identity.MintKyokToken([]byte(secret),
			identity.NewKyokClaims(runID, other.Key, other.Name, time.Now())), body: body, signer: other.signer}, 403, "run_not_active"},
		{"unknown run", signedCall{token: identity.MintKyokToken([]byte(secret),
			identity.NewKyokClaims("run-nope", a.Key, a.Name, time.Now())), body: body, signer: a.signer}, 403, "run_not_active"},
		{"no signature", signedCall{token: token, body: body, noSig: true}, 401, "invalid_signature"},
		{"stale timestamp", signedCall{token: token, body: body, signer: a.signer, ts: &old}, 401, "invalid_signature"},
		{"wrong signature", signedCall{token: token, body: body, signer: other.signer}, 401, "invalid_signature"},
		{"future timestamp (replay window)", signedCall{token: token, body: body, signer: a.signer, ts: &future}, 401, "invalid_signature"},
		{"body not JSON", signedCall{token: token, body: `{"model":`, signer: a.signer}, 400, "malformed_json"},
		{"duplicate key", signedCall{token: token, body: `{"model":"gpt-4","model":"other","messages":[{"role":"user","content":"hi"}]}`, signer: a.signer}, 400, "malformed_json"},
		{"invalid UTF-8", signedCall{token: token, body: "{\"model\":\"gpt-4\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", signer: a.signer}, 400, "malformed_json"},
		{"deep nesting", signedCall{token: token, body: `{"model":"gpt-4","messages":[{"role":"user","content":"hi"}],"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, signer: a.signer}, 400, "malformed_json"},
		{"not a chat request", signedCall{token: token, body: `{"model":"gpt-4"}`, signer: a.signer}, 400, "invalid_request"},
	} {
		t.Run(x.name, func(t *testing.T) {
			code, b := e.call(x.c)
			if got, _ := errorCode(t, b); code != x.code || got != x.want {
				t.Fatalf("%d %s, want %d %s", code, b, x.code, x.want)
			}
		})
	}
	t.Run("no binding", func(t *testing.T) {
		r2, _, tok2 := e.startRun(a, kyok.Ref{}, "")
		code, b := e.call(signedCall{token: tok2, body: body, signer: a.signer})
		if got, _ := errorCode(t, b); code != 503 || got != "no_kyok_binding" {
			t.Fatalf("%s: %d %s", r2, code, b)
		}
	})
	t.Run("offering not attached", func(t *testing.T) {
		gone := e.attachLLM(0x42, "mistral")
		r3, _, tok3 := e.startRun(a, kyok.Ref{ProviderKey: gone.Key, Name: "mistral"}, "")
		gone.Close()
		eventually(t, "mistral unserved", func() bool {
			ok, _ := e.H.Store.LLMOfferingServed(context.Background(), gone.Key, "mistral")
			return !ok
		})
		code, b := e.call(signedCall{token: tok3, body: body, signer: a.signer})
		if got, _ := errorCode(t, b); code != 503 || got != "llm_not_attached" {
			t.Fatalf("%s: %d %s", r3, code, b)
		}
	})
	t.Run("structured refusal relayed intact", func(t *testing.T) {
		l.onRequest(func(l *llm, req wire.KyokCompletionRequest) {
			l.send(wire.KyokError{Type: wire.TypeError, RequestID: req.RequestID, Message: "over budget",
				Refusal: json.RawMessage(`{"code":"budget","detail":"monthly cap reached","limit":[1,2]}`)})
		})
		code, b := e.call(signedCall{token: token, body: body, signer: a.signer})
		got, refusal := errorCode(t, b)
		if code != 502 || got != "llm_refused" || string(refusal) != `{"code":"budget","detail":"monthly cap reached","limit":[1,2]}` {
			t.Fatalf("%d %s", code, b)
		}
		l.request()
	})
	t.Run("mid-stream refusal", func(t *testing.T) {
		l.onRequest(func(l *llm, req wire.KyokCompletionRequest) {
			l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: chunkJSON("c", "par", "")})
			l.send(wire.KyokError{Type: wire.TypeError, RequestID: req.RequestID, Message: "over budget",
				Refusal: json.RawMessage(`{"code":"budget"}`)})
		})
		code, b := e.call(signedCall{token: token, signer: a.signer,
			body: `{"model":"gpt-4","stream":true,"messages":[{"role":"user","content":"hi"}]}`})
		events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
		if code != 200 || len(events) != 2 || events[1] != `data: {"error":{"code":"budget"}}` {
			t.Fatalf("%d %q", code, events)
		}
		l.request()
	})
	t.Run("mid-stream failure", func(t *testing.T) {
		l.onRequest(func(l *llm, req wire.KyokCompletionRequest) {
			l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: chunkJSON("c", "par", "")})
			l.send(wire.KyokError{Type: wire.TypeError, RequestID: req.RequestID, Message: "upstream 500"})
		})
		code, b := e.call(signedCall{token: token, signer: a.signer,
			body: `{"model":"gpt-4","stream":true,"messages":[{"role":"user","content":"hi"}]}`})
		events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
		if code != 200 || len(events) != 2 || events[1] != `data: {"error":{"message":"upstream 500","type":"funduq_relay_failed"}}` {
			t.Fatalf("%d %q", code, events)
		}
		l.request()
	})
	t.Run("cancel requested", func(t *testing.T) {
		r4, _, tok4 := e.startRun(a, ref, "")
		if _, err := e.H.Store.RequestCancel(context.Background(), r4, ""); err != nil {
			t.Fatal(err)
		}
		code, b := e.call(signedCall{token: tok4, body: body, signer: a.signer})
		if got, _ := errorCode(t, b); code != 403 || got != "run_not_active" {
			t.Fatalf("%d %s", code, b)
		}
	})
	t.Run("run ended", func(t *testing.T) {
		a.Prov.Complete(runID, threadID)
		e.H.WaitStatus(runID, run.Completed)
		code, b := e.call(signedCall{token: token, body: body, signer: a.signer})
		if got, _ := errorCode(t, b); code != 403 || got != "run_not_active" {
			t.Fatalf("%d %s", code, b)
		}
	})
}

// One success, one refusal, one failure: the LLM provider's persisted
// counters read 1, 1, 1.
func TestCounters(t *testing.T) {
	e := newEnv(t, 0)
	l := e.attachLLM(0x41, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, "")
	const body = `{"model":"gpt-4","messages":[{"role":"user","content":"hi"}]}`
	for _, x := range []struct {
		answer func(l *llm, req wire.KyokCompletionRequest)
		code   int
	}{
		{streamAnswer("fine"), 200},
		{func(l *llm, req wire.KyokCompletionRequest) {
			l.send(wire.KyokError{Type: wire.TypeError, RequestID: req.RequestID, Message: "no", Refusal: json.RawMessage(`{"code":"policy"}`)})
		}, 502},
		{func(l *llm, req wire.KyokCompletionRequest) {
			l.send(wire.KyokError{Type: wire.TypeError, RequestID: req.RequestID, Message: "boom"})
		}, 502},
	} {
		l.onRequest(x.answer)
		if code, b := e.call(signedCall{token: token, body: body, signer: a.signer}); code != x.code {
			t.Fatalf("%d %s", code, b)
		}
		l.request()
	}
	eventually(t, "counters 1,1,1", func() bool {
		q := e.H.Quality(l.Key)
		return q.Completions == 1 && q.Refused == 1 && q.Failed == 1
	})
}

// Measures the time the relay adds to the first chunk: the agent's time to
// first chunk through door, Redis, leader and link, less the LLM provider's
// own (request received → first chunk sent). Logged, never asserted.
func TestAddedTimeToFirstChunk(t *testing.T) {
	e := newEnv(t, 0)
	l := e.attachLLM(0x41, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, "")
	const own = 20 * time.Millisecond // the scripted LLM's own time to first chunk
	ownCh := make(chan time.Duration, 1)
	l.onRequest(func(l *llm, req wire.KyokCompletionRequest) {
		start := time.Now()
		time.Sleep(own)
		l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: chunkJSON("c", "x", "")})
		ownCh <- time.Since(start)
		l.send(wire.Done{Type: wire.TypeDone, RequestID: req.RequestID})
	})
	c := client(e, a, token)
	const n = 40
	var added []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		s := c.Chat.Completions.NewStreaming(context.Background(), params())
		if !s.Next() {
			t.Fatal(s.Err())
		}
		total := time.Since(start)
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		<-l.reqs
		added = append(added, total-<-ownCh)
	}
	slices.Sort(added)
	t.Logf("relay-added time to first chunk over %d streamed calls (LLM's own TTFT %s): p50 %s, p90 %s, min %s, max %s",
		n, own, added[n/2], added[n*9/10], added[0], added[n-1])
	_ = http.StatusOK
}

// The run frame leaves beside the offering write, so an agent that calls
// KYOK at once can be ahead of it and find its run still queued. Such a
// call is served: only the provider offered the run holds its token. Here
// the run is held queued for good (its provider's one place is taken) to
// make the window deterministic.
func TestCallForAQueuedRunIsServed(t *testing.T) {
	e := newEnv(t, 0)
	l := e.attachLLM(0x42, "gpt-4")
	l.onRequest(streamAnswer("ok"))
	s, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0x14))
	p := e.H.Connect(0x14, nodetest.Limit(1))
	p.Register("translator")
	a := &agent{signer: s, Prov: p, Key: p.Key, Name: "translator"}
	ref := kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}
	e.startRun(a, ref, "") // takes the provider's one place
	queued, _ := e.startRunQueued(a, ref, "")
	p.None() // not offered: it stays queued
	token := identity.MintKyokToken([]byte(secret), identity.NewKyokClaims(queued, a.Key, a.Name, time.Now()))
	code, b := e.call(signedCall{token: token, signer: a.signer,
		body: `{"model":"gpt-4","stream":true,"messages":[{"role":"user","content":"hi"}]}`})
	if code != 200 || !strings.Contains(string(b), "data: [DONE]") {
		t.Fatalf("%d %s", code, b)
	}
	l.request()
}

// A completion request the relay cannot read but can answer (a reply key,
// no request id) is answered with an error on that key, not dropped with a
// log line: the door waiting on it hears at once.
func TestUnreadableRequestIsAnswered(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	replyKey := e.H.Prefix + "kyok:reply:test-unreadable"
	if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: kyok.RequestStream(e.H.Prefix),
		Values: []any{kyok.FieldRequest, `{"replyKey":"` + replyKey + `"}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := e.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{replyKey, "0-0"}, Block: guard}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 1 {
		t.Fatalf("no reply: %v %v", res, err)
	}
	var rep kyok.Reply
	raw, _ := res[0].Messages[0].Values[kyok.FieldReply].(string)
	if err := json.Unmarshal([]byte(raw), &rep); err != nil || rep.Kind != kyok.ReplyError {
		t.Fatalf("reply %s (%v)", raw, err)
	}
}
