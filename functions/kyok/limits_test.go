package kyok_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/kyok"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
)

// One LLM link carries at most KyokMaxConcurrent completions; one more is
// refused at once (429 llm_busy, Retry-After) and never reaches the link,
// and once one ends the next is taken.
func TestConcurrentCompletionsPerLink(t *testing.T) {
	e := newEnvWith(t, 0, func(c *config.Broker) { c.KyokMaxConcurrent = 1 })
	l := e.attachLLM(0x41, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, "")
	const body = `{"model":"gpt-4","messages":[{"role":"user","content":"hi"}]}`
	first := make(chan int, 1)
	go func() {
		code, _ := e.call(signedCall{token: token, body: body, signer: a.signer})
		first <- code
	}()
	req := l.request() // held: the link is at its limit
	code, b := e.call(signedCall{token: token, body: body, signer: a.signer})
	if got, _ := errorCode(t, b); code != http.StatusTooManyRequests || got != "llm_busy" {
		t.Fatalf("second completion: %d %s", code, b)
	}
	streamAnswer("ok")(l, req)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("first completion: %d", code)
	}
	l.onRequest(streamAnswer("again"))
	eventually(t, "the link takes a completion again", func() bool {
		code, _ := e.call(signedCall{token: token, body: body, signer: a.signer})
		return code == http.StatusOK
	})
}

// A non-streaming call holds its answer whole to collapse it; an answer
// past MaxCollapsed is refused rather than held — and not to be retried as
// it was sent (the official OpenAI clients retry a 502 twice by default,
// asking the caller's LLM for the same long answer again): the remedy is
// stream: true.
func TestCollapsedAnswerIsBounded(t *testing.T) {
	e := newEnv(t, 0)
	small, err := kyokdoor.New(kyokdoor.Options{Store: e.H.Store, Redis: e.rdb, Prefix: e.H.Prefix,
		TokenSecret: []byte(secret), MaxCollapsed: 100})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(small)
	t.Cleanup(srv.Close)
	e.DoorURL = srv.URL
	l := e.attachLLM(0x41, "gpt-4")
	l.onRequest(streamAnswer(strings.Repeat("a", 60), strings.Repeat("b", 60)))
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, "")
	var h http.Header
	code, b := e.call(signedCall{token: token, body: `{"model":"gpt-4","messages":[{"role":"user","content":"hi"}]}`, signer: a.signer, header: &h})
	if got, _ := errorCode(t, b); code != http.StatusBadGateway || got != "llm_answer_too_large" {
		t.Fatalf("%d %s", code, b)
	}
	if got := h.Get("X-Should-Retry"); got != "false" {
		t.Errorf("X-Should-Retry %q, want false", got)
	}
}
