package kyok_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/nodejs"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// usageChunk is OpenAI's last chunk under stream_options.include_usage:
// no choices, the usage.
const usageChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1755300000,"model":"gpt-4","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}`

// toolCallChunks are OpenAI's stream of two parallel tool calls: each
// call's first delta carries its index, id, type, function name and the
// start of its arguments, the later ones only the index and more
// arguments; a last empty delta finishes "tool_calls".
var toolCallChunks = []string{
	`{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"index":0,"id":"call_weather","type":"function","function":{"name":"get_weather","arguments":"{\"ci"}}]}`,
	`{"tool_calls":[{"index":0,"function":{"arguments":"ty\":\"Paris\","}}]}`,
	`{"tool_calls":[{"index":0,"function":{"arguments":"\"unit\":\"celsius\"}"}}]}`,
	`{"tool_calls":[{"index":1,"id":"call_time","type":"function","function":{"name":"get_time","arguments":""}}]}`,
	`{"tool_calls":[{"index":1,"function":{"arguments":"{\"tz\":"}}]}`,
	`{"tool_calls":[{"index":1,"function":{"arguments":"\"Europe/Paris\"}"}}]}`,
}

// nodeLLM answers like an OpenAI-compatible LLM provider, by the body's
// model: "gpt-4" with three chunks (usage null on each, as OpenAI streams
// them) and a usage chunk; "gpt-4-cut" with a chunk then an unstructured
// failure; "gpt-4-refuse" with the model's refusal (delta.refusal);
// "gpt-4-tools" with two tool calls streamed as OpenAI streams them
// (toolCallChunks); any other model refused with OpenAI's model_not_found.
func nodeLLM(l *llm, req wire.KyokCompletionRequest) {
	var body struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(req.Body, &body)
	chunk := func(content, finish string) {
		fr := "null"
		if finish != "" {
			fr = fmt.Sprintf("%q", finish)
		}
		l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: json.RawMessage(fmt.Sprintf(
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1755300000,"model":"gpt-4","system_fingerprint":null,`+
				`"choices":[{"index":0,"delta":{"role":"assistant","content":%q,"refusal":null},"logprobs":null,"finish_reason":%s}],"usage":null}`,
			content, fr))})
	}
	switch body.Model {
	case "gpt-4":
		chunk("Hel", "")
		chunk("lo, ", "")
		chunk("world", "stop")
		l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: json.RawMessage(usageChunk)})
		l.send(wire.Done{Type: wire.TypeDone, RequestID: req.RequestID})
	case "gpt-4-refuse":
		l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: json.RawMessage(
			`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1755300000,"model":"gpt-4",` +
				`"choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`)})
		l.send(wire.Done{Type: wire.TypeDone, RequestID: req.RequestID})
	case "gpt-4-tools":
		for _, delta := range toolCallChunks {
			l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: json.RawMessage(
				`{"id":"chatcmpl-3","object":"chat.completion.chunk","created":1755300000,"model":"gpt-4",` +
					`"choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":null}]}`)})
		}
		l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: json.RawMessage(
			`{"id":"chatcmpl-3","object":"chat.completion.chunk","created":1755300000,"model":"gpt-4",` +
				`"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}`)})
		l.send(wire.Done{Type: wire.TypeDone, RequestID: req.RequestID})
	case "gpt-4-cut":
		chunk("par", "")
		l.send(wire.KyokError{Type: wire.TypeError, RequestID: req.RequestID, Message: "upstream 500"})
	default:
		l.send(wire.KyokError{Type: wire.TypeError, RequestID: req.RequestID, Message: "unknown model",
			Refusal: json.RawMessage(fmt.Sprintf(`{"code":"model_not_found","message":"The model %s does not exist","type":"invalid_request_error"}`,
				body.Model))})
	}
}

// The acceptance test with the official OpenAI Node client (openai, its
// defaults, retries included), signing each call as an agent's SDK does:
// a non-streaming completion, a streaming one (text, finish_reason,
// usage), the client's own stream accumulator, function calling (two tool
// calls streamed in pieces, collapsed and accumulated), a bad token
// (AuthenticationError 401), an unknown model (the LLM provider's refusal:
// InternalServerError 502 llm_refused, sent to the provider once per
// call), and a mid-stream failure — against a real broker node, relay and
// door on loopback.
func TestOpenAINodeClientEndToEnd(t *testing.T) {
	node, dir := nodejs.Project(t, "e2e", "openai")
	e := newEnv(t, 0)
	l := e.attachLLM(0x41, "gpt-4")
	l.onRequest(nodeLLM)
	a := e.connectAgent(0x11, "translator")
	runID, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, `{"voucher":"v-1"}`)

	var mu sync.Mutex
	models := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case req := <-l.reqs:
				var body struct {
					Model string `json:"model"`
				}
				_ = json.Unmarshal(req.Body, &body)
				if req.RunID != runID || req.ProviderKey != a.Key || string(req.Context) != `{"voucher":"v-1"}` {
					t.Errorf("completionRequest %+v", req)
				}
				mu.Lock()
				models[body.Model]++
				mu.Unlock()
			}
		}
	})
	t.Cleanup(func() { close(stop); wg.Wait() })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "run.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FUNDUQ_KYOK="+e.DoorURL+"/kyok/v1", "FUNDUQ_TOKEN="+token,
		"FUNDUQ_SEED="+nodetest.SeedHex(0x11), "NODE_ENV=test")
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node run.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("client report: %s", stdout.String())
	var rep struct {
		Collapsed     struct{ ID, Content string }
		Streamed      struct{ Text, Finish string }
		BadToken      struct{ Status int }
		RefusalMember json.RawMessage
		ModelRefusal  struct {
			Streamed         string
			Collapsed        json.RawMessage
			CollapsedContent json.RawMessage
		}
		UnknownModel struct {
			Status  int
			Code    string
			Refusal json.RawMessage
		}
		ToolCalls struct{ Collapsed, Accumulated toolAnswer }
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	if rep.Collapsed.Content != "Hello, world" || rep.Streamed.Text != "Hello, world" || rep.Streamed.Finish != "stop" ||
		rep.BadToken.Status != 401 || rep.UnknownModel.Status != 502 || rep.UnknownModel.Code != "llm_refused" {
		t.Errorf("report %+v", rep)
	}
	// What reached the LLM provider: three gpt-4 calls, the stream cut
	// once, two tool-calling calls, and each unknown-model call once — a
	// refusal is not retried.
	want := map[string]int{"gpt-4": 3, "gpt-4-refuse": 2, "gpt-4-tools": 2, "gpt-4-cut": 1, "gpt-nope": 2}
	eventually(t, "every call counted", func() bool {
		q := e.H.Quality(l.Key)
		return q.Completions+q.Refused+q.Failed >= 10
	})
	mu.Lock()
	defer mu.Unlock()
	t.Run("collapsed message.refusal", func(t *testing.T) {
		// OpenAI's ChatCompletionMessage.refusal is required, string or
		// null; the client's type says so. A collapsed answer carries it
		// null, and a model's streamed refusal collapses into it, not
		// into an empty answer that looks like success (design.md §KYOK).
		if string(rep.RefusalMember) != "null" || string(rep.ModelRefusal.Collapsed) != `"I can't help with that."` || string(rep.ModelRefusal.CollapsedContent) != "null" {
			t.Errorf("collapsed refusal member %s; a model's refusal collapses to refusal %s, content %s (streamed %q)",
				rep.RefusalMember, rep.ModelRefusal.Collapsed, rep.ModelRefusal.CollapsedContent, rep.ModelRefusal.Streamed)
		}
	})
	t.Run("tool calls", func(t *testing.T) {
		// The two streamed calls, merged by index (id, type and name as
		// first sent, the arguments concatenated), whether the door
		// collapses them or the client's stream helper accumulates them.
		wantCalls := []toolCall{
			{ID: "call_weather", Type: "function", Name: "get_weather", Arguments: map[string]any{"city": "Paris", "unit": "celsius"}},
			{ID: "call_time", Type: "function", Name: "get_time", Arguments: map[string]any{"tz": "Europe/Paris"}},
		}
		for name, got := range map[string]toolAnswer{"collapsed": rep.ToolCalls.Collapsed, "accumulated": rep.ToolCalls.Accumulated} {
			if got.Finish != "tool_calls" || string(got.Refusal) != "null" || !reflect.DeepEqual(got.Calls, wantCalls) {
				t.Errorf("%s: finish_reason %q, refusal %s, tool_calls %+v; want tool_calls, null, %+v",
					name, got.Finish, got.Refusal, got.Calls, wantCalls)
			}
			// With no content streamed, message.content is null, as in
			// OpenAI's own answer and the client's accumulation: "" would
			// read as a text answer to code that tells them apart.
			if string(got.Content) != "null" {
				t.Errorf("%s: message.content %s, want null", name, got.Content)
			}
		}
		// The helper's tool_calls.function.arguments.done events: one per
		// call, in order, with its full arguments.
		var done []toolCall
		for _, c := range wantCalls {
			done = append(done, toolCall{Name: c.Name, Arguments: c.Arguments})
		}
		if got := rep.ToolCalls.Accumulated.ArgumentsDone; !reflect.DeepEqual(got, done) {
			t.Errorf("arguments.done events %+v, want %+v", got, done)
		}
	})
	if fmt.Sprint(models) != fmt.Sprint(want) {
		t.Errorf("completion requests by model %v, want %v", models, want)
	}
	if q := e.H.Quality(l.Key); q.Completions != 7 || q.Refused != 2 || q.Failed != 1 {
		t.Errorf("quality %+v, want 7 completions, 2 refused, 1 failed", q)
	}
}

// toolAnswer is what run.mjs reports of a tool-calling answer: the
// choice's finish_reason, its message's refusal, content and tool calls,
// and (from the stream helper) its tool_calls.function.arguments.done
// events.
type toolAnswer struct {
	Finish        string
	Refusal       json.RawMessage
	Content       json.RawMessage
	Calls         []toolCall
	ArgumentsDone []toolCall
}

// toolCall is a tool call as run.mjs reports it, its arguments parsed.
type toolCall struct {
	ID, Type, Name string
	Arguments      any // parsed; the string as sent when not JSON
}
