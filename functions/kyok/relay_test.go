package kyok_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/wire"
)

const plainBody = `{"model":"gpt-4","messages":[{"role":"user","content":"hi"}]}`

// The relay's link rules: answers count only on the connection the request
// went to; re-attaching under the same key takes the offering over for later
// completions while the old link keeps its own in-flight one; a replaced
// link's teardown leaves its replacement serving; link loss fails an
// in-flight completion at once; deleteModel is refused while a completion
// is in flight or a live run is bound.
func TestRelayLinkRules(t *testing.T) {
	e := newEnv(t, 0)
	old := e.attachLLM(0x41, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	ref := kyok.Ref{ProviderKey: old.Key, Name: "gpt-4"}
	_, _, token := e.startRun(a, ref, "")

	// A completion in flight on the old link.
	type result struct {
		code int
		body []byte
	}
	first := make(chan result, 1)
	go func() {
		code, b := e.call(signedCall{token: token, body: plainBody, signer: a.signer})
		first <- result{code, b}
	}()
	req1 := old.request()

	t.Run("deleteModel refused while in flight", func(t *testing.T) {
		old.send(wire.DeleteModel{Type: wire.TypeDeleteModel, Name: "gpt-4"})
		var f wire.KyokError
		old.expect(wire.TypeError, &f)
		if f.Name != "gpt-4" || !strings.Contains(f.Message, "in flight") {
			t.Fatalf("%+v", f)
		}
	})

	// The same key re-attaches: the new link serves later completions.
	repl := e.attachLLM(0x41, "gpt-4")
	repl.onRequest(streamAnswer("from the new link"))

	t.Run("answers only on the request's connection", func(t *testing.T) {
		repl.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req1.RequestID, Data: chunkJSON("c", "x", "")})
		var f wire.KyokError
		repl.expect(wire.TypeError, &f)
		if f.RequestID != req1.RequestID || f.Message != "no such in-flight completion on this connection" {
			t.Fatalf("%+v", f)
		}
		repl.send(json.RawMessage(`{"type":"done"}`))
		repl.expect(wire.TypeError, &f)
		if f.Message != "frame needs a requestId" {
			t.Fatalf("%+v", f)
		}
		repl.send(json.RawMessage(`{"type":"nonsense"}`))
		repl.expect(wire.TypeError, &f)
		if f.Message != "unknown frame type 'nonsense'" {
			t.Fatalf("%+v", f)
		}
	})
	t.Run("the old link finishes its own completion", func(t *testing.T) {
		streamAnswer("from the old link")(old, req1)
		r := <-first
		if r.code != 200 || !strings.Contains(string(r.body), "from the old link") {
			t.Fatalf("%d %s", r.code, r.body)
		}
	})
	t.Run("later completions go to the new link", func(t *testing.T) {
		code, b := e.call(signedCall{token: token, body: plainBody, signer: a.signer})
		if code != 200 || !strings.Contains(string(b), "from the new link") {
			t.Fatalf("%d %s", code, b)
		}
		repl.request()
	})
	t.Run("the replaced link's teardown leaves the offering served", func(t *testing.T) {
		old.Close()
		code, b := e.call(signedCall{token: token, body: plainBody, signer: a.signer})
		if code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		repl.request()
		if ok, _ := e.H.Store.LLMOfferingServed(context.Background(), repl.Key, "gpt-4"); !ok {
			t.Fatal("offering unserved by the old link's teardown")
		}
	})
	t.Run("deleteModel refused while a live run is bound", func(t *testing.T) {
		repl.send(wire.DeleteModel{Type: wire.TypeDeleteModel, Name: "gpt-4"})
		var f wire.KyokError
		repl.expect(wire.TypeError, &f)
		if !strings.Contains(f.Message, "live run is bound") {
			t.Fatalf("%+v", f)
		}
	})
	t.Run("link loss fails the in-flight completion", func(t *testing.T) {
		repl.onRequest(func(l *llm, req wire.KyokCompletionRequest) { go l.Close() })
		code, b := e.call(signedCall{token: token, body: plainBody, signer: a.signer})
		if got, _ := errorCode(t, b); code != 502 || got != "llm_failed" {
			t.Fatalf("%d %s", code, b)
		}
	})
}

// A completion whose provider goes silent fails after the gap (shortened
// here); the stream ends with the relay failure and no [DONE].
func TestGapEndsCompletion(t *testing.T) {
	e := newEnv(t, 300*time.Millisecond)
	l := e.attachLLM(0x41, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, "")
	l.onRequest(func(l *llm, req wire.KyokCompletionRequest) {
		l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: chunkJSON("c", "then silence", "")})
	})
	code, b := e.call(signedCall{token: token, signer: a.signer,
		body: `{"model":"gpt-4","stream":true,"messages":[{"role":"user","content":"hi"}]}`})
	events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	if code != 200 || len(events) != 2 || !strings.Contains(events[1], "funduq_relay_failed") || !strings.Contains(events[1], "sent nothing") {
		t.Fatalf("%d %q", code, events)
	}
	eventually(t, "failed counted", func() bool { return e.H.Quality(l.Key).Failed == 1 })
}

// deleteModel succeeds once nothing is bound, and the offering is gone from
// the durable roster.
func TestDeleteModel(t *testing.T) {
	e := newEnv(t, 0)
	l := e.attachLLM(0x41, "gpt-4", "claude")
	l.send(wire.DeleteModel{Type: wire.TypeDeleteModel, Name: "claude"})
	var d wire.Deleted
	l.expect(wire.TypeDeleted, &d)
	if d.Name != "claude" {
		t.Fatalf("%+v", d)
	}
	if ok, _ := e.H.Store.LLMOfferingExists(context.Background(), l.Key, "claude"); ok {
		t.Fatal("claude still registered")
	}
	if ok, _ := e.H.Store.LLMOfferingExists(context.Background(), l.Key, "gpt-4"); !ok {
		t.Fatal("gpt-4 gone")
	}
	l.send(wire.RegisterModels{Type: wire.TypeRegister, Models: []string{}})
	var f wire.KyokError
	l.expect(wire.TypeError, &f)
}

// KYOK link frames go through the doors' strict JSON check: a repeated key
// is answered with an error frame and changes nothing.
func TestKyokFramesAreStrictJSON(t *testing.T) {
	e := newEnv(t, 0)
	l := e.attachLLM(0x41, "gpt-4")
	for _, frame := range []string{
		`{"type":"register","models":["claude"],"models":["mistral"]}`,
		`{"type":"deleteModel","name":"gpt-4","name":"gpt-4"}`,
	} {
		l.send(json.RawMessage(frame))
		var f wire.KyokError
		l.expect(wire.TypeError, &f)
		if !strings.Contains(f.Message, "repeats a key") {
			t.Errorf("%s: error %+v, want a strict JSON refusal", frame, f)
		}
	}
	// A good frame after them is the barrier.
	l.send(wire.RegisterModels{Type: wire.TypeRegister, Models: []string{"gpt-4"}})
	var r wire.Registered
	l.expect(wire.TypeRegistered, &r)
	for name, want := range map[string]bool{"gpt-4": true, "claude": false, "mistral": false} {
		if ok, _ := e.H.Store.LLMOfferingExists(context.Background(), l.Key, name); ok != want {
			t.Errorf("offering %s registered %v, want %v", name, ok, want)
		}
	}
}
