package kyok_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/kyok"
)

// A chunk whose members the relay reads have the wrong JSON type — a
// delta.content, delta.role or finish_reason that is not a string (nor
// null), an id or model that is not a string — does not validate as a
// ChatCompletionChunk and fails the completion (provider-link.md §8.1).
// It must never be read leniently: a content array collapsed into the
// text `["a","b"]` is a wrong answer that looks like success, and differs
// from what the same chunk streams.
func TestOutsideMistypedChunkFailsTheCompletion(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x5b, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	const head = `"object":"chat.completion.chunk","created":1`
	for _, data := range []string{
		`{"id":"a",` + head + `,"model":"m","choices":[{"index":0,"delta":{"content":["a","b"]}}]}`,
		`{"id":"a",` + head + `,"model":"m","choices":[{"index":0,"delta":{"content":{"text":"x"}}}]}`,
		`{"id":"a",` + head + `,"model":"m","choices":[{"index":0,"delta":{"content":123}}]}`,
		`{"id":"a",` + head + `,"model":"m","choices":[{"index":0,"delta":{"role":7,"content":"x"}}]}`,
		`{"id":"a",` + head + `,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":["stop"]}]}`,
		`{"id":9,` + head + `,"model":"m","choices":[{"index":0,"delta":{"content":"x"}}]}`,
		`{"id":"a",` + head + `,"model":{"name":"m"},"choices":[{"index":0,"delta":{"content":"x"}}]}`,
	} {
		chunkFailsTheCompletion(t, e, l, a, token, data)
	}
}

// chunkFailsTheCompletion answers a call, streamed and not, with a good
// chunk and then data, and checks the completion failed: 502 llm_failed
// collapsed, a final error and no [DONE] streamed.
func chunkFailsTheCompletion(t *testing.T, e *env, l *rawLLM, a *agent, token, data string) {
	t.Helper()
	for _, stream := range []bool{false, true} {
		body := plainBody
		if stream {
			body = streamBody
		}
		res := e.asyncCall(a, token, body)
		id := l.requestID()
		l.raw(rawChunk(id, chunkData("kept")))
		l.raw(rawChunk(id, data))
		l.raw(`{"type":"done","requestId":"` + id + `"}`)
		r := wait(t, res)
		// Drain the link's answers up to a barrier of our own.
		l.raw(`{"type":"deleteModel","name":"barrier"}`)
		for m := l.next("error"); m["name"] != "barrier"; m = l.next("error") {
		}
		if !stream {
			if got, _ := errorCode(t, r.body); r.code != 502 || got != "llm_failed" {
				t.Errorf("%s collapsed: %d %s, want 502 llm_failed", data, r.code, r.body)
			}
			continue
		}
		ev := sseEvents(r.body)
		if r.code != 200 || ev[len(ev)-1] == "data: [DONE]" || !strings.Contains(ev[len(ev)-1], "funduq_relay_failed") {
			t.Errorf("%s streamed: %d %q, want a final error and no [DONE]", data, r.code, ev)
		}
	}
}
