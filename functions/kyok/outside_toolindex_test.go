package kyok_test

import (
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
		chunkFailsTheCompletion(t, e, l, a, token, data)
	}
}
