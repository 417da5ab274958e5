package a2a_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

// authz is a local stack with one agent, a head H, a stranger, another
// provider, and the authorizer seat under the test's control.
type authz struct {
	t               *testing.T
	h               *nodetest.Harness
	p, other        *nodetest.Prov
	head, stray     *identity.Signer
	prov, otherProv *identity.Signer
	c               *client
	seat            string
}

func newAuthz(t *testing.T) *authz {
	a := &authz{t: t, h: nodetest.Start(t, nil)}
	a.p = a.h.Connect(0xe1, nil)
	a.p.Register("echo")
	a.other = a.h.Connect(0xe2, nil)
	a.other.Register("else")
	a.head, a.stray = signer(t, 0xc1), signer(t, 0xc9)
	a.prov, a.otherProv = signer(t, 0xe1), signer(t, 0xe2)
	srv := startDoor(t, a.h, func(o *a2a.Options) {
		o.AuthorizedKey = func(*http.Request) string { return a.seat }
	})
	a.c = newClient(t, srv, a.p.Key, "echo", "")
	return a
}

// boundSend sends msg on behalf of H (chain + presenter proof), with the
// request metadata md merged.
func (a *authz) boundSend(msg map[string]any, md map[string]any, blocking bool) rpcResp {
	a.t.Helper()
	meta := map[string]any{"actorChain": chainOf(a.t, a.head)}
	for k, v := range md {
		meta[k] = v
	}
	body := a.c.body("message/send", map[string]any{"message": msg, "metadata": meta,
		"configuration": map[string]any{"blocking": blocking}})
	return a.c.rawCall(body, map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(a.head, time.Now().Unix(), []byte(body))})
}

// completedBound is a finished task on a context bound to H.
func (a *authz) completedBound(msgID string) (taskID, contextID string) {
	a.t.Helper()
	r := a.boundSend(a.c.message(msgID, "hi", nil), nil, false)
	if r.Error != nil {
		a.t.Fatalf("bound send: %+v", r.Error)
	}
	f := a.p.Offer()
	a.p.Accept(f.RunID)
	a.p.Complete(f.RunID, *f.ThreadID)
	a.h.WaitStatus(f.RunID, run.Completed)
	return f.RunID, *f.ThreadID
}

func viewHdr(s *identity.Signer, id string, ts int64) map[string]string {
	return map[string]string{door.ViewHeader: identity.MakeViewHeader(s, id, ts)}
}

// errOf is an error answer as a caller sees it.
type errOf struct {
	Status  int
	Code    int
	Message string
}

func (a *authz) callAs(method string, params map[string]any, hdr map[string]string) rpcResp {
	a.t.Helper()
	return a.c.rawCall(a.c.body(method, params), hdr)
}

func asErr(t *testing.T, r rpcResp, id, unknownID string) errOf {
	t.Helper()
	if r.Error == nil {
		t.Fatalf("want an error, got result %v", r.Result)
	}
	return errOf{r.Status, r.Error.Code, strings.ReplaceAll(r.Error.Message, id, unknownID)}
}

const unknownTask = "run_000000000000000000000000"

// Reproduction (issue 17, bullet 1): tasks/get on a bound task, with no
// credentials, returned the whole conversation. Now it answers exactly as
// an unknown task; list and resubscribe likewise.
func TestBoundTaskReadsAnswerOnlyParties(t *testing.T) {
	a := newAuthz(t)
	id, ctxID := a.completedBound("m-1")
	unknown := asErr(t, a.callAs("tasks/get", map[string]any{"id": unknownTask}, nil), "", "")
	if got := asErr(t, a.callAs("tasks/get", map[string]any{"id": id}, nil), id, unknownTask); got != unknown {
		t.Fatalf("a stranger's tasks/get: %+v, unknown %+v", got, unknown)
	}
	unknownSub := asErr(t, a.callAs("tasks/resubscribe", map[string]any{"id": unknownTask}, nil), "", "")
	if got := asErr(t, a.callAs("tasks/resubscribe", map[string]any{"id": id}, nil), id, unknownTask); got != unknownSub {
		t.Fatalf("a stranger's resubscribe: %+v, unknown %+v", got, unknownSub)
	}
	l := &client{t: t, url: a.c.url, version: "1.0"}
	page := l.ok("ListTasks", map[string]any{"contextId": ctxID})
	if tasks, _ := page["tasks"].([]any); len(tasks) != 0 {
		t.Fatalf("a stranger listed the bound context: %v", page)
	}
	if r := a.callAs("tasks/get", map[string]any{"id": id}, viewHdr(a.head, id, time.Now().Unix())); r.Error != nil || r.Result["id"] != id {
		t.Fatalf("the head's view proof: %+v", r.Error)
	}
	a.seat = a.prov.PublicKeyHex()
	if r := a.callAs("tasks/get", map[string]any{"id": id}, nil); r.Error != nil {
		t.Fatalf("the provider's seat: %+v", r.Error)
	}
}

// Reproduction (bullet 2): caller B sending the messageId caller A used on a
// new context got A's task, and B's message was dropped.
func TestMessageIDBelongsToItsCaller(t *testing.T) {
	a := newAuthz(t)
	aTask, _ := a.completedBound("msg-1")
	done := make(chan string, 1)
	go func() {
		f := a.p.Offer()
		a.p.Accept(f.RunID)
		a.p.Complete(f.RunID, *f.ThreadID)
		done <- f.RunID
	}()
	b := a.c.send(a.c.message("msg-1", "something else", nil), nil)
	if b["id"] == aTask {
		t.Fatalf("caller B got caller A's task %s", aTask)
	}
	offered := <-done
	if b["id"] == aTask || b["id"] != offered {
		t.Fatalf("caller B got task %v (A's is %s, B's offered %s)", b["id"], aTask, offered)
	}
	for _, m := range b["history"].([]any) {
		if strings.Contains(mustJSON(m), `"hi"`) {
			t.Fatalf("B's task shows A's history: %v", b["history"])
		}
	}
}

// Reproduction (bullet 5): a stranger's cancel on a bound task answered
// -32042 (revealing existence and binding) where an unknown task answers
// -32001.
func TestBoundCancelByStrangerIsUnknown(t *testing.T) {
	a := newAuthz(t)
	id, _ := a.completedBound("m-1")
	unknown := asErr(t, a.callAs("tasks/cancel", map[string]any{"id": unknownTask}, nil), "", "")
	if got := asErr(t, a.callAs("tasks/cancel", map[string]any{"id": id}, nil), id, unknownTask); got != unknown {
		t.Fatalf("a stranger's cancel: %+v, unknown %+v", got, unknown)
	}
}

// Reproduction (bullet 7): the cancelRequested marker stayed on a task
// after it completed.
func TestCancelMarkerOnlyWhilePending(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	task := c.send(c.message("c-1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	h.WaitStatus(f.RunID, run.Running)
	if got := c.ok("tasks/cancel", map[string]any{"id": task["id"]}); !marker(got) {
		t.Fatalf("cancel answer without the marker: %v", got)
	}
	h.WaitStatus(f.RunID, run.Cancelling)
	// The provider declines to stop and completes.
	p.Complete(f.RunID, *f.ThreadID)
	h.WaitStatus(f.RunID, run.Completed)
	if g := c.ok("tasks/get", map[string]any{"id": task["id"]}); stateOf(g) != "completed" || marker(g) {
		t.Fatalf("a completed task still marked cancel-requested: %v", g)
	}
}

// Reproduction (bullet 6, A2A): an answer to a bound paused task needs the
// resolution proof over its open asks, refused with the same typed error
// as the AG-UI door's.
func TestA2AAnswerNeedsResolutionProof(t *testing.T) {
	a := newAuthz(t)
	go func() { pause(a.p, a.p.Offer()) }()
	r := a.boundSend(a.c.message("q-1", "may I?", nil), nil, true)
	if r.Error != nil || stateOf(r.Result) != "input-required" {
		t.Fatalf("pause: %+v %v", r.Error, r.Result)
	}
	id := r.Result["id"].(string)
	md, _ := r.Result["metadata"].(map[string]any)
	if mustJSON(md[a2a.OutstandingAsksKey]) != `["ask-1"]` {
		t.Fatalf("outstanding asks %v", md)
	}
	r = a.boundSend(a.c.message("q-2", "yes", map[string]any{"taskId": id}), nil, false)
	if r.Error == nil || r.Error.Code != a2a.CodeInvalidResolution || r.Error.Data["reason"] != door.CodeInvalidResolution {
		t.Fatalf("answer without proof: %+v", r.Error)
	}
	if st := a.h.Run(id).Status; st != run.InputRequired {
		t.Fatalf("a refused answer moved the task to %s", st)
	}
	proof := map[string]any{"publicKey": a.head.PublicKeyHex(), "signature": a.head.Sign(identity.ResolutionPayload(id, []string{"ask-1"}))}
	r = a.boundSend(a.c.message("q-3", "yes", map[string]any{"taskId": id}), map[string]any{"resolution": proof}, false)
	if r.Error != nil || r.Result["id"] != id {
		t.Fatalf("answer with proof: %+v %v", r.Error, r.Result)
	}
	f := a.p.Offer()
	a.p.Accept(f.RunID)
	a.p.Complete(f.RunID, *f.ThreadID)
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
