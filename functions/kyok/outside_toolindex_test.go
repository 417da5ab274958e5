package kyok_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/kyok"
)

// A tool-call delta without its index (or with a null one) does not read as
// a ChatCompletionChunk — OpenAI's tool-call delta requires the index, the
// only thing that says which call a delta continues — and fails the
// completion (provider-link.md §8.1). Read as index 0, two parallel calls
// sent whole in one chunk collapsed into one call, named as the first,
// with both argument strings run together: a wrong answer that looks like
// success.
func TestOutsideToolCallWithoutIndexFailsTheCompletion(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x5d, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	const head = `{"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":`
	for _, data := range []string{
		head + `[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}},` +
			`{"id":"call_2","type":"function","function":{"name":"get_time","arguments":"{\"tz\":\"CET\"}"}}]},"finish_reason":"tool_calls"}]}`,
		head + `[{"index":null,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},"finish_reason":null}]}`,
	} {
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
}
