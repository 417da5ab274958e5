package kyok_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/kyok"
)

// Whether a call streams is read from the body's "stream" member exactly
// as the LLM provider reads it: JSON keys are case-sensitive, so "Stream"
// or "STREAM" is another member (one OpenAI does not know), not "stream".
// A door that matched keys case-insensitively (Go's encoding/json) would
// answer SSE to a call that asked — as the LLM provider read it — for one
// chat.completion, and an OpenAI client expecting JSON could not read it.
func TestOutsideStreamIsReadWithItsExactKey(t *testing.T) {
	e := newEnv(t, 0)
	a := e.connectAgent(0x11, "translator")
	for i, tc := range []struct {
		body   string
		stream bool
	}{
		{`{"model":"gpt-4","stream":false,"Stream":true,"messages":[{"role":"user","content":"hi"}]}`, false},
		{`{"model":"gpt-4","STREAM":true,"messages":[{"role":"user","content":"hi"}]}`, false},
		{`{"model":"gpt-4","Stream":false,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, true},
	} {
		l := e.rawLLM(byte(0x60+i), "gpt-4")
		_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
		res := e.asyncCall(a, token, tc.body)
		req := l.next("completionRequest")
		id, _ := req["requestId"].(string)
		// What the LLM provider reads: the body relayed as sent.
		body, _ := json.Marshal(req["body"])
		if s, ok := req["body"].(string); ok {
			body = []byte(s)
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(body, &members); err != nil {
			t.Fatalf("relayed body %s: %v", body, err)
		}
		var asked bool
		_ = json.Unmarshal(members["stream"], &asked)
		if asked != tc.stream {
			t.Fatalf("the LLM provider reads stream=%v from %s", asked, body)
		}
		l.raw(rawChunk(id, chunkData("hello")))
		l.raw(`{"type":"done","requestId":"` + id + `"}`)
		r := wait(t, res)
		if r.code != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.body, r.code, r.body)
		}
		isSSE := strings.HasPrefix(string(r.body), "data:")
		if isSSE != tc.stream {
			t.Errorf("%s: answered %s, want stream=%v as the LLM provider read it", tc.body, fmt.Sprintf("%.60q", r.body), tc.stream)
		}
	}
}
