package a2a_test

// Issue #10 at the A2A door: strict bodies, runs waiting per context, and
// a stranger's cancel learning nothing of a bound task's state.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

func TestHostileBodies(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *a2a.Options) { o.Limits.MaxJSONDepth = 16 })
	c := newClient(t, srv, p.Key, "echo", "")
	runs, threads := count(t, h, "runs"), count(t, h, "threads")
	msg := `{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}`
	for name, body := range map[string]string{
		"duplicate method":     `{"jsonrpc":"2.0","id":1,"method":"tasks/get","method":"message/send","params":{"message":` + msg + `}}`,
		"duplicate messageId":  `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"a","messageId":"b","role":"user","parts":[]}}}`,
		"duplicate actorChain": `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":` + msg + `,"metadata":{"actorChain":[],"actorChain":["x"]}}}`,
		"invalid UTF-8":        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"message/send\",\"params\":{\"message\":{\"kind\":\"message\",\"messageId\":\"\xff\",\"role\":\"user\",\"parts\":[]}}}",
		"deep nesting":         `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":` + msg + `,"metadata":{"x":` + strings.Repeat("[", 30) + strings.Repeat("]", 30) + `}}}`,
	} {
		r := c.rawCall(body, nil)
		if r.Error == nil || r.Error.Code != a2a.CodeParseError {
			t.Errorf("%s → %d %+v, want %d", name, r.Status, r.Error, a2a.CodeParseError)
		}
	}
	for name, body := range map[string]string{
		"id an object":          `{"jsonrpc":"2.0","id":{"a":1},"method":"tasks/get","params":{"id":"x"}}`,
		"historyLength huge":    `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":` + msg + `,"configuration":{"historyLength":1e30}}}`,
		"parts of wrong type":   `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user","parts":"x"}}}`,
		"messageId missing":     `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","role":"user","parts":[]}}}`,
		"params a number":       `{"jsonrpc":"2.0","id":1,"method":"message/send","params":7}`,
		"method a number":       `{"jsonrpc":"2.0","id":1,"method":7}`,
		"oversized (via limit)": "",
	} {
		if body == "" {
			continue
		}
		r := c.rawCall(body, nil)
		if r.Error == nil || r.Error.Code == a2a.CodeInternalError || r.Status >= 500 {
			t.Errorf("%s → %d %+v, want a refusal", name, r.Status, r.Error)
		}
	}
	small := startDoor(t, h, func(o *a2a.Options) { o.MaxBody = 64 })
	if r := newClient(t, small, p.Key, "echo", "").rawCall(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":`+msg+`}}`, nil); r.Error == nil || r.Error.Code != a2a.CodeInvalidRequest || r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized: %d %+v", r.Status, r.Error)
	}
	if r, th := count(t, h, "runs"), count(t, h, "threads"); r != runs || th != threads {
		t.Fatalf("refusals wrote rows: runs %d→%d threads %d→%d", runs, r, threads, th)
	}
	p.None()
}

// A context with MaxQueuedPerThread tasks waiting refuses one more: HTTP
// 429, Retry-After, JSON-RPC -32044, nothing written.
func TestTasksQueuedPerContext(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *a2a.Options) { o.Limits.MaxQueuedPerThread = 1 })
	c := newClient(t, srv, p.Key, "echo", "")
	task := c.send(c.message("q-1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	f := p.Offer() // offering
	runs := count(t, h, "runs")
	r := c.call("message/send", map[string]any{"message": c.message("q-2", "again", map[string]any{"contextId": task["contextId"]}),
		"configuration": map[string]any{"blocking": false}})
	if r.Error == nil || r.Error.Code != a2a.CodeThreadQueueFull || r.Status != http.StatusTooManyRequests {
		t.Fatalf("second waiting task: %d %+v", r.Status, r.Error)
	}
	if n := count(t, h, "runs"); n != runs {
		t.Fatalf("a refused task was written: %d→%d", runs, n)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	h.WaitStatus(f.RunID, run.Completed)
}

// A stranger's cancel of a bound task is refused identically whether the
// task is running or has ended: the refusal says nothing of its state.
func TestStrangerCancelLearnsNothing(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	head, stranger := signer(t, 0xc1), signer(t, 0xc9)
	id := c.sendBound(head, "s-1")
	f := p.Offer()
	p.Accept(f.RunID)
	h.WaitStatus(id, run.Running)
	refusal := func() string {
		now := time.Now().Unix()
		md := cancelProof(stranger, id, now)
		// To a stranger the bound task is unknown (D16), whatever its state.
		r := c.code(a2a.CodeTaskNotFound, "tasks/cancel", map[string]any{"id": id, "metadata": md})
		return r.Error.Message
	}
	running := refusal()
	if got := h.Run(id); got.Status != run.Running {
		t.Fatalf("a stranger's cancel changed the run: %+v", got)
	}
	p.Complete(f.RunID, *f.ThreadID)
	h.WaitStatus(id, run.Completed)
	if ended := refusal(); ended != running {
		t.Fatalf("the refusal differs with the state: running %q, ended %q", running, ended)
	}
}

// A stranger cannot answer a bound task that waits for input, and the
// refusal is the same as for a bound task that is not waiting: it says
// nothing of the task's state. Nothing is written.
func TestStrangerCannotAnswerBoundTask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("ask")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "ask", "")
	head, stranger := signer(t, 0xc1), signer(t, 0xc9)
	signed := func(s *identity.Signer, body string) map[string]string {
		return map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(s, time.Now().Unix(), []byte(body))}
	}
	go func() { pause(p, p.Offer()) }()
	body := c.body("message/send", map[string]any{"message": c.message("b-1", "may I?", nil),
		"metadata": map[string]any{"actorChain": chainOf(t, head)}})
	r := c.rawCall(body, signed(head, body))
	if r.Error != nil || stateOf(r.Result) != "input-required" {
		t.Fatalf("bound paused task: %+v %v", r.Error, r.Result)
	}
	id, ctxID := r.Result["id"].(string), r.Result["contextId"].(string)
	runs := count(t, h, "runs")
	answer := func(s *identity.Signer, msgID string) rpcResp {
		md := map[string]any{"actorChain": chainOf(t, s),
			"resolution": map[string]any{"publicKey": s.PublicKeyHex(), "signature": s.Sign(identity.ResolutionPayload(id, []string{"ask-1"}))}}
		body := c.body("message/send", map[string]any{"message": c.message(msgID, "yes", map[string]any{"taskId": id, "contextId": ctxID}),
			"metadata": md})
		return c.rawCall(body, signed(s, body))
	}
	// To a stranger the bound task is unknown (D16).
	waiting := answer(stranger, "s-1")
	if waiting.Error == nil || waiting.Error.Code != a2a.CodeTaskNotFound {
		t.Fatalf("stranger's answer: %d %+v", waiting.Status, waiting.Error)
	}
	chainless := c.call("message/send", map[string]any{"message": c.message("s-2", "yes", map[string]any{"taskId": id, "contextId": ctxID})})
	if chainless.Error == nil || chainless.Error.Code != a2a.CodeTaskNotFound {
		t.Fatalf("chainless answer: %d %+v", chainless.Status, chainless.Error)
	}
	if n := count(t, h, "runs"); n != runs {
		t.Fatalf("a refused answer was written: %d→%d", runs, n)
	}
	// The head answers; the task completes. The stranger's refusal then
	// reads exactly as before.
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
	}()
	if r := answer(head, "h-1"); r.Error != nil {
		t.Fatalf("head's answer: %+v", r.Error)
	}
	h.WaitStatus(id, run.Completed)
	after := answer(stranger, "s-3")
	if after.Error == nil || after.Error.Code != waiting.Error.Code || after.Error.Message != waiting.Error.Message {
		t.Fatalf("the refusal differs with the state: waiting %+v, completed %+v", waiting.Error, after.Error)
	}
}
