package a2a_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/functions/a2a"
)

// The authority matrix of the A2A door (README "Security and limits"): for
// every method acting on a bound task or context, what each party gets. One
// subtest per cell; "unknown" means exactly the answer an unknown id gets
// (HTTP status, JSON-RPC code and message).
func TestAuthorityMatrix(t *testing.T) {
	a := newAuthz(t)
	id, ctxID := a.completedBound("m-1")
	otherID, otherCtx := a.completedBound("m-2")
	now := time.Now().Unix()
	stale := now - 3600
	lifted := map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(a.head, now, []byte(`{"other":"body"}`))}
	presenter := signer(t, 0xc2)
	cancelBy := func(s *identity.Signer, runID string, ts int64) map[string]any {
		return map[string]any{"cancel": map[string]any{"publicKey": s.PublicKeyHex(), "timestamp": ts,
			"signature": s.Sign(identity.CancelPayload(runID, ts))}}
	}
	// Each party: how it shows itself (seat, headers over the id read, a
	// cancel proof), and whether it is one.
	type party struct {
		name   string
		seat   string
		hdr    func(id string) map[string]string
		cancel func(id string) map[string]any
		ok     bool
	}
	none := func(string) map[string]string { return nil }
	parties := []party{
		{"head", "", func(id string) map[string]string { return viewHdr(a.head, id, now) },
			func(id string) map[string]any { return cancelBy(a.head, id, now) }, true},
		{"presenter", "", none, nil, false}, // replaced below: the seat of P on a thread P presented
		{"provider", a.prov.PublicKeyHex(), none, func(id string) map[string]any { return cancelBy(a.prov, id, now) }, true},
		{"other provider", "", func(id string) map[string]string { return viewHdr(a.otherProv, id, now) },
			func(id string) map[string]any { return cancelBy(a.otherProv, id, now) }, false},
		{"stranger", "", none, func(id string) map[string]any { return cancelBy(a.stray, id, now) }, false},
		{"replayed proof", "", func(string) map[string]string { return lifted }, nil, false},
		{"proof for another run", "", func(string) map[string]string { return viewHdr(a.head, otherID, now) },
			func(string) map[string]any { return cancelBy(a.head, otherID, now) }, false},
		{"expired proof", "", func(id string) map[string]string { return viewHdr(a.head, id, stale) },
			func(id string) map[string]any { return cancelBy(a.head, id, stale) }, false},
	}
	// The presenter: a context H bound and P presented (a delegated chain).
	pTask, pCtx := a.delegatedTask(presenter)
	_ = otherCtx

	type method struct {
		name   string
		params func(task, ctx string, p party) map[string]any
		// okCode is what a party gets (0: a result).
		okCode int
		// check reads a result a party got.
		check func(t *testing.T, r rpcResp, task string)
		// unknown is an unknown id's answer: an error, or (ListTasks) an
		// empty page.
		emptyPage bool
	}
	methods := []method{
		{name: "tasks/get", params: func(task, _ string, _ party) map[string]any { return map[string]any{"id": task} },
			check: func(t *testing.T, r rpcResp, task string) {
				if r.Result["id"] != task {
					t.Fatalf("result %v", r.Result)
				}
			}},
		{name: "tasks/resubscribe", params: func(task, _ string, _ party) map[string]any { return map[string]any{"id": task} },
			okCode: a2a.CodeUnsupportedOperation}, // a party learns it has ended
		{name: "tasks/cancel", params: func(task, _ string, p party) map[string]any {
			m := map[string]any{"id": task}
			if p.cancel != nil {
				m["metadata"] = p.cancel(task)
			}
			return m
		}, okCode: a2a.CodeTaskNotCancelable}, // past the authority check: it has ended
		{name: "ListTasks", params: func(_, ctx string, _ party) map[string]any { return map[string]any{"contextId": ctx} },
			emptyPage: true, check: func(t *testing.T, r rpcResp, _ string) {
				if tasks, _ := r.Result["tasks"].([]any); len(tasks) != 1 {
					t.Fatalf("a party's page %v", r.Result)
				}
			}},
	}
	v10 := &client{t: t, url: a.c.url, version: "1.0"}
	for _, m := range methods {
		cl := a.c
		if m.name == "ListTasks" {
			cl = v10
		}
		for _, p := range parties {
			task, ctx := id, ctxID
			if p.name == "presenter" {
				p.seat, p.ok, task, ctx = presenter.PublicKeyHex(), true, pTask, pCtx
				p.cancel = func(id string) map[string]any { return cancelBy(presenter, id, now) }
			}
			t.Run(m.name+"/"+p.name, func(t *testing.T) {
				a.seat = p.seat
				defer func() { a.seat = "" }()
				hdrID := task
				if m.name == "ListTasks" {
					hdrID = ctx
				}
				got := cl.rawCall(cl.body(m.name, m.params(task, ctx, p)), p.hdr(hdrID))
				if p.ok && m.name == "tasks/cancel" && p.name == "presenter" {
					// A party, but not one who may stop the run: told why.
					if got.Error == nil || got.Error.Code != a2a.CodeInvalidCancel {
						t.Fatalf("presenter's cancel: %+v", got.Error)
					}
					return
				}
				if p.ok {
					switch {
					case m.okCode != 0 && (got.Error == nil || got.Error.Code != m.okCode):
						t.Fatalf("a party got %+v %v, want %d", got.Error, got.Result, m.okCode)
					case m.okCode == 0 && got.Error != nil:
						t.Fatalf("a party got %+v", got.Error)
					case m.check != nil:
						m.check(t, got, task)
					}
					return
				}
				const unknownID = "run_000000000000000000000000"
				if m.emptyPage {
					if got.Error != nil || mustJSON(got.Result) != `{"nextPageToken":"","pageSize":0,"tasks":[],"totalSize":0}` {
						t.Fatalf("got %+v %v, want an unknown context's empty page", got.Error, got.Result)
					}
					return
				}
				unknown := cl.rawCall(cl.body(m.name, m.params(unknownID, "", p)), nil)
				g, u := asErr(t, got, task, unknownID), asErr(t, unknown, "", "")
				if g != u || u.Code != a2a.CodeTaskNotFound {
					t.Fatalf("got %+v, an unknown task %+v", g, u)
				}
			})
		}
	}
}

// The A2A answer row of the matrix: a message naming a bound paused task,
// one paused task per cell.
func TestAuthorityMatrixAnswer(t *testing.T) {
	a := newAuthz(t)
	presenter := signer(t, 0xc2)
	delegated := func() []string {
		h0, _ := identity.SignHop(a.head, nil, nil)
		h1, _ := identity.SignHop(presenter, &h0, nil)
		return []string{h0.Token, h1.Token}
	}
	type answerer struct {
		name     string
		signer   *identity.Signer // presents the chain; nil: no chain
		chain    func() []string
		proofBy  *identity.Signer
		proofRun func(paused string) string
		asks     []string
		ts       int64
		code     int // 0: the answer reopens the task
	}
	now := time.Now().Unix()
	same := func(p string) string { return p }
	headChain := func() []string { return chainOf(t, a.head) }
	otherRun, _ := a.completedBound("o-1")
	ask := []string{"ask-1"}
	n := 0
	for _, an := range []answerer{
		{"head", a.head, headChain, a.head, same, ask, now, 0},
		{"presenter", presenter, delegated, presenter, same, ask, now, a2a.CodeInvalidResolution},
		{"provider", a.prov, func() []string { return chainOf(t, a.prov) }, a.prov, same, ask, now, 0},
		{"other provider", a.otherProv, func() []string { return chainOf(t, a.otherProv) }, a.otherProv, same, ask, now, a2a.CodeTaskNotFound},
		{"stranger", nil, nil, nil, same, ask, now, a2a.CodeTaskNotFound},
		{"replayed proof", a.head, headChain, a.head, same, []string{"ask-0"}, now, a2a.CodeInvalidResolution},
		{"proof for another run", a.head, headChain, a.head, func(string) string { return otherRun }, ask, now, a2a.CodeInvalidResolution},
		{"expired proof", a.head, headChain, a.head, same, ask, now - 3600, a2a.CodeUnauthenticated},
	} {
		t.Run("message/send answer/"+an.name, func(t *testing.T) {
			n++
			go func() { pause(a.p, a.p.Offer()) }()
			r := a.boundSend(a.c.message(fmt.Sprintf("q-%d", n), "may I?", nil), nil, true)
			if r.Error != nil || stateOf(r.Result) != "input-required" {
				t.Fatalf("pause: %+v %v", r.Error, r.Result)
			}
			id := r.Result["id"].(string)
			params := map[string]any{"message": a.c.message(fmt.Sprintf("a-%d", n), "yes", map[string]any{"taskId": id})}
			if an.chain != nil {
				params["metadata"] = map[string]any{"actorChain": an.chain(), "resolution": map[string]any{
					"publicKey": an.proofBy.PublicKeyHex(), "signature": an.proofBy.Sign(identity.ResolutionPayload(an.proofRun(id), an.asks))}}
			}
			body := a.c.body("message/send", params)
			var hdr map[string]string
			if an.signer != nil {
				hdr = map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(an.signer, an.ts, []byte(body))}
			}
			if an.code == 0 {
				go func() {
					f := a.p.Offer()
					a.p.Accept(f.RunID)
					a.p.Complete(f.RunID, *f.ThreadID)
				}()
			}
			got := a.c.rawCall(body, hdr)
			if an.code == 0 {
				if got.Error != nil || got.Result["id"] != id {
					t.Fatalf("answer: %+v %v", got.Error, got.Result)
				}
				a.h.WaitStatus(id, "completed")
				return
			}
			if got.Error == nil || got.Error.Code != an.code || a.h.Run(id).Status != "input-required" {
				t.Fatalf("got %+v, want %d and the pause untouched", got.Error, an.code)
			}
			if an.code == a2a.CodeTaskNotFound {
				const unknownID = "run_000000000000000000000000"
				ub := strings.ReplaceAll(body, id, unknownID)
				var uh map[string]string
				if an.signer != nil {
					uh = map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(an.signer, an.ts, []byte(ub))}
				}
				u := a.c.rawCall(ub, uh)
				if g, w := asErr(t, got, id, unknownID), asErr(t, u, "", ""); g != w {
					t.Fatalf("got %+v, an unknown task %+v", g, w)
				}
			}
		})
	}
}

// delegatedTask is a finished task on a context bound to H and presented
// by P (chain H → P, P's presenter proof).
func (a *authz) delegatedTask(p *identity.Signer) (taskID, contextID string) {
	a.t.Helper()
	h0, err := identity.SignHop(a.head, nil, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	h1, err := identity.SignHop(p, &h0, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	body := a.c.body("message/send", map[string]any{"message": a.c.message("d-1", "hi", nil),
		"metadata": map[string]any{"actorChain": []string{h0.Token, h1.Token}}, "configuration": map[string]any{"blocking": false}})
	r := a.c.rawCall(body, map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(p, time.Now().Unix(), []byte(body))})
	if r.Error != nil {
		a.t.Fatalf("delegated send: %+v", r.Error)
	}
	f := a.p.Offer()
	a.p.Accept(f.RunID)
	a.p.Complete(f.RunID, *f.ThreadID)
	a.h.WaitStatus(f.RunID, "completed")
	if !strings.HasPrefix(f.RunID, "run_") {
		a.t.Fatalf("run id %s", f.RunID)
	}
	return f.RunID, *f.ThreadID
}
