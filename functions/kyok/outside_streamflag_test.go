package kyok_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/kyok"
)

// "stream" that is not a boolean is the calling agent's mistake, refused
// 400 invalid_request naming it before the LLM provider is asked: read as
// false, the door would collapse an answer the agent may have meant to
// stream (and an LLM provider reading it loosely, as "true" is truthy,
// would disagree with the door about what was asked).
func TestOutsideStreamThatIsNotABooleanIsRefused(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x59, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	priv := rawSeed(0x11)
	for _, stream := range []string{`"true"`, `1`, `"false"`, `{}`} {
		t.Run(stream, func(t *testing.T) {
			body := `{"model":"gpt-4","stream":` + stream + `,"messages":[{"role":"user","content":"hi"}]}`
			type answered struct {
				code int
				hdr  http.Header
				body []byte
			}
			res := make(chan answered, 1)
			go func() {
				code, hdr, b := e.rawCall(priv, token, time.Now().Unix(), body, body)
				res <- answered{code, hdr, b}
			}()
			select {
			case r := <-res:
				if c, _ := errorCode(t, r.body); r.code != 400 || c != "invalid_request" || !strings.Contains(string(r.body), "stream") {
					t.Fatalf("got %d %s, want 400 invalid_request naming stream", r.code, r.body)
				}
			case f := <-l.frames:
				t.Fatalf("the call reached the LLM provider: %v", f)
			case <-time.After(guard):
				t.Fatal("the call hung")
			}
		})
	}
}
