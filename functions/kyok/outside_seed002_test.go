package kyok_test

import (
	"encoding/json"
	"testing"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/wire"
)

// Seed 002: "For an LLM provider, the fate of each relayed completion:
// streamed to the end (completions), ended in a structured refusal
// (refused), died with anything else (failed) … The LLM-provider counters
// carry no such consequence." With a tolerance of one, an LLM provider
// that refuses a completion and fails the next is counted once each and
// still relays the third; nobody is withdrawn.
func TestOutsideSeed002LLMCountersWithdrawNobody(t *testing.T) {
	e := newEnvWith(t, 0, func(c *config.Broker) { c.ProviderQualityTolerance = 1 })
	l := e.attachLLM(0x41, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, "")
	answers := []func(l *llm, req wire.KyokCompletionRequest){
		func(l *llm, req wire.KyokCompletionRequest) {
			l.send(wire.KyokError{Type: wire.TypeError, RequestID: req.RequestID, Message: "policy",
				Refusal: json.RawMessage(`{"reason":"policy"}`)})
		},
		func(l *llm, req wire.KyokCompletionRequest) {
			l.send(wire.KyokError{Type: wire.TypeError, RequestID: req.RequestID, Message: "upstream broke"})
		},
		streamAnswer("still here"),
	}
	want := []string{"llm_refused", "llm_failed", ""}
	for i, answer := range answers {
		l.onRequest(answer)
		code, b := e.call(signedCall{token: token, body: plainBody, signer: a.signer})
		if want[i] == "" {
			if code != 200 {
				t.Fatalf("completion %d: %d %s, want it relayed", i, code, b)
			}
			continue
		}
		if got, _ := errorCode(t, b); code != 502 || got != want[i] {
			t.Fatalf("completion %d: %d %s, want 502 %s", i, code, b, want[i])
		}
	}
	eventually(t, "each counted", func() bool {
		q := e.H.Quality(l.Key)
		return q.Refused == 1 && q.Failed == 1 && q.Completions == 1
	})
	if q := e.H.Quality(l.Key); q.WithdrawnAt != nil {
		t.Fatalf("an LLM provider was withdrawn: %+v", q)
	}
	if q := e.H.Quality(a.Key); q.Misdeclared+q.Unanswered+q.AnsweredLate+q.Abandoned+q.Undelivered != 0 {
		t.Fatalf("the calling agent's provider was counted %+v", q)
	}
}
