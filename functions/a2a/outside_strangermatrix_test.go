package a2a_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

// Every method that names a task or a context, called on caller A's bound
// task (running, and again once completed) by someone who is not a party
// — anonymous, caller B with a presenter proof over the body, B through
// the authorizer seat, another agent's provider at the seat, B with a view
// or cancel proof of its own over A's id — is answered exactly as the same call naming an unknown id: the
// same HTTP status, the same JSON-RPC code, message and data with the id
// replaced, and no result (design.md D16). In both protocol versions;
// nothing is written.
func TestOutsideStrangersGetTheUnknownAnswerOnEveryMethod(t *testing.T) {
	a := newAuthz(t)
	bob := signer(t, 0xc7)
	const unknownCtx = "thread_000000000000000000000000"
	id := a.c.sendBound(a.head, "a-1")
	f := a.p.Offer()
	a.p.Accept(f.RunID)
	a.p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	a.h.WaitStatus(id, run.Running)
	ctxID := *f.ThreadID

	type who struct {
		name string
		hdr  func(body, id string) map[string]string
		seat string
		md   func(id string) map[string]any
	}
	callers := []who{
		{name: "anonymous", hdr: func(string, string) map[string]string { return nil }},
		{name: "B presenting", hdr: func(body, _ string) map[string]string {
			return map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(bob, time.Now().Unix(), []byte(body))}
		}},
		{name: "B at the seat", hdr: func(string, string) map[string]string { return nil }, seat: bob.PublicKeyHex()},
		{name: "another agent's provider at the seat", hdr: func(string, string) map[string]string { return nil }, seat: a.otherProv.PublicKeyHex()},
		{name: "B with its own proofs", hdr: func(_, id string) map[string]string { return viewHdr(bob, id, time.Now().Unix()) },
			md: func(id string) map[string]any { return cancelProof(bob, id, time.Now().Unix()) }},
	}
	type method struct {
		v03, v10 string
		params   func(task, ctx string) map[string]any
		last     string // Last-Event-ID
	}
	byTask := func(extra map[string]any) func(task, ctx string) map[string]any {
		return func(task, _ string) map[string]any {
			p := map[string]any{"id": task}
			for k, v := range extra {
				p[k] = v
			}
			return p
		}
	}
	methods := []method{
		{v03: "tasks/get", v10: "GetTask", params: byTask(nil)},
		{v03: "tasks/get", v10: "GetTask", params: byTask(map[string]any{"historyLength": 0})},
		{v03: "tasks/get", v10: "GetTask", params: byTask(map[string]any{"historyLength": 100})},
		{v03: "tasks/cancel", v10: "CancelTask", params: byTask(nil)},
		{v03: "tasks/resubscribe", v10: "SubscribeToTask", params: byTask(nil)},
		{v03: "tasks/resubscribe", v10: "SubscribeToTask", params: byTask(nil), last: "1"},
		{v03: "tasks/pushNotificationConfig/set", v10: "CreateTaskPushNotificationConfig", params: func(task, _ string) map[string]any {
			return map[string]any{"taskId": task, "pushNotificationConfig": map[string]any{"url": "https://example.com/hook"}}
		}},
		{v03: "tasks/pushNotificationConfig/get", v10: "GetTaskPushNotificationConfig", params: byTask(nil)},
		{v03: "tasks/pushNotificationConfig/list", v10: "ListTaskPushNotificationConfigs", params: byTask(nil)},
		{v03: "tasks/pushNotificationConfig/delete", v10: "DeleteTaskPushNotificationConfig", params: func(task, _ string) map[string]any {
			return map[string]any{"id": task, "pushNotificationConfigId": "c1"}
		}},
		{v10: "ListTasks", params: func(_, ctx string) map[string]any { return map[string]any{"contextId": ctx} }},
	}
	// answer is a call's answer with the task and context ids named as the
	// unknown ones: what a caller can compare.
	answer := func(c *client, w who, m method, task, ctx string) string {
		t.Helper()
		name := m.v03
		if c.version == "1.0" {
			name = m.v10
		}
		p := m.params(task, ctx)
		if w.md != nil {
			p["metadata"] = w.md(task)
		}
		body := c.body(name, p)
		hdr := w.hdr(body, task)
		if hdr == nil {
			hdr = map[string]string{}
		}
		if m.last != "" {
			hdr[a2a.LastEventIDHeader] = m.last
		}
		a.seat = w.seat
		defer func() { a.seat = "" }()
		resp, cancel := c.post(body, hdr)
		defer cancel()
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var r map[string]any
		if err := json.Unmarshal(b, &r); err != nil {
			return resp.Status + " " + resp.Header.Get("Content-Type") + " (not one JSON answer)"
		}
		delete(r, "id") // the request's own id
		out, _ := json.Marshal(r)
		s := strings.NewReplacer(task, unknownTask, ctx, unknownCtx).Replace(string(out))
		return resp.Status + " " + s
	}
	check := func(state string) {
		for _, version := range []string{"", "1.0"} {
			c := &client{t: t, url: a.c.url, version: version}
			for _, m := range methods {
				if (version == "" && m.v03 == "") || (version == "1.0" && m.v10 == "") {
					continue
				}
				for _, w := range callers {
					unknown := answer(c, w, m, unknownTask, unknownCtx)
					got := answer(c, w, m, id, ctxID)
					if got != unknown {
						t.Errorf("%s task, %s, %s %s (Last-Event-ID %q):\n got %s\nwant %s", state, w.name, m.v03, m.v10, m.last, got, unknown)
					}
				}
			}
		}
	}
	// Not vacuous: the head's own view proof reads the task.
	head := who{name: "the head", hdr: func(_, id string) map[string]string { return viewHdr(a.head, id, time.Now().Unix()) }}
	if got, unknown := answer(a.c, head, methods[0], id, ctxID), answer(a.c, head, methods[0], unknownTask, unknownCtx); got == unknown || !strings.Contains(got, `"result"`) {
		t.Fatalf("the head's tasks/get answered %s, an unknown task %s", got, unknown)
	}
	check("running")
	if got := a.h.Run(id); got.Status != run.Running {
		t.Fatalf("the strangers' calls moved the run to %s", got.Status)
	}
	a.p.Complete(f.RunID, ctxID)
	a.h.WaitStatus(id, run.Completed)
	check("completed")
}
