package kyok_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/kyok"
)

// A mistyped chunk is refused to the LLM provider in the chunk's own
// terms — which member, what it must be — not in funduq's Go type names.
func TestOutsideMistypedChunkIsRefusedInWireTerms(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x62, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	res := e.asyncCall(a, token, plainBody)
	id := l.requestID()
	l.raw(rawChunk(id, `{"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":["a","b"]}}]}`))
	m := l.next("error")
	const want = "choices.delta.content must be a string (got array)"
	if msg := fmt.Sprint(m["message"]); !strings.HasSuffix(msg, want) || strings.Contains(msg, "Go ") {
		t.Errorf("answered %q, want it to end %q", msg, want)
	}
	if r := wait(t, res); r.code != 502 {
		t.Fatalf("%d %s", r.code, r.body)
	}
}
