package kyok_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/run"
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

// Seed 002: "There is no exemption for a run whose LLM completion funduq
// is itself relaying: a provider that accepted work it could not turn
// around said yes when it could have said no." A run whose agent waits on
// its caller's LLM past the undelivered window is counted undelivered
// against the agent's provider, never the LLM provider, and left alone:
// the completion still ends whole, and the run with it.
func TestOutsideSeed002NoExemptionForARunWaitingOnItsCompletion(t *testing.T) {
	e := newEnv(t, 0)
	l := e.attachLLM(0x41, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	runID, threadID, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, "")
	type result struct {
		code int
		body []byte
	}
	done := make(chan result, 1)
	go func() {
		code, b := e.call(signedCall{token: token, body: plainBody, signer: a.signer})
		done <- result{code, b}
	}()
	req := l.request() // in flight: the LLM provider thinks
	e.H.Settle()
	e.H.Advance(1801 * time.Second) // undelivered_window
	eventually(t, "undelivered counted", func() bool { return e.H.Quality(a.Key).Undelivered == 1 })
	if got := e.H.Run(runID).Status; got != run.Running {
		t.Fatalf("the count settled the run: %s", got)
	}
	streamAnswer("late but whole")(l, req)
	if r := <-done; r.code != 200 || !strings.Contains(string(r.body), "late but whole") {
		t.Fatalf("the completion: %d %s", r.code, r.body)
	}
	a.Prov.Complete(runID, threadID)
	e.H.WaitStatus(runID, run.Completed)
	eventually(t, "the completion counted", func() bool { return e.H.Quality(l.Key).Completions == 1 })
	if q := e.H.Quality(l.Key); q.Refused+q.Failed+q.Misdeclared+q.Unanswered+q.AnsweredLate+q.Abandoned+q.Undelivered != 0 {
		t.Fatalf("the LLM provider was counted %+v", q)
	}
	if q := e.H.Quality(a.Key); q.Undelivered != 1 || q.Misdeclared+q.Unanswered+q.AnsweredLate+q.Abandoned != 0 {
		t.Fatalf("the agent's provider was counted %+v, want undelivered once", q)
	}
}
