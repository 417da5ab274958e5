package a2a_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Counts (historyLength, pageSize) as real clients send them: an A2A 1.0
// client that encodes through ProtoJSON may send an int32 as a string
// ("1") or with a fraction or exponent that is still an integer (1.0,
// 1e0), and ProtoJSON servers read all of them. Each is taken as the count
// it is, in either version; a value that is no count at all (true, 1.5,
// "x", -1) is refused -32602 naming that parameter — never blaming
// params.id, and never in the Go decoder's words.
func TestOutsideCountsInEveryJSONForm(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			c := newClient(t, srv, p.Key, "echo", v)
			complete := func() {
				go func() {
					f := p.Offer()
					p.Accept(f.RunID)
					p.Complete(f.RunID, *f.ThreadID)
				}()
			}
			complete()
			first := taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message("counts-1-"+v, "hi", nil)}))
			id, ctxID := first["id"].(string), first["contextId"].(string)
			if got := historyTexts(first); len(got) != 2 {
				t.Fatalf("the task's history %q, want the message and its reply", got)
			}
			complete()
			second := taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message("counts-2-"+v, "again", map[string]any{"contextId": ctxID})}))
			h.WaitStatus(second["id"].(string), run.Completed)

			call := func(method, params string) rpcResp {
				t.Helper()
				if m := methodOf(v, method); m != "" {
					method = m
				}
				return c.rawCall(fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":%s}`, method, params), nil)
			}
			for _, n := range []string{`1`, `"1"`, `1.0`, `1e0`, `0.1e1`} {
				r := call("tasks/get", fmt.Sprintf(`{"id":%q,"historyLength":%s}`, id, n))
				if r.Error != nil {
					t.Errorf("tasks/get historyLength %s: refused %d %s", n, r.Error.Code, r.Error.Message)
				} else if got := historyTexts(r.Result); len(got) != 1 || got[0] != "agent:hello" {
					t.Errorf("tasks/get historyLength %s: history %q, want the last message alone", n, got)
				}
				// The ended task is not cancelable: the count was read.
				if r := call("tasks/cancel", fmt.Sprintf(`{"id":%q,"historyLength":%s}`, id, n)); r.Error == nil || r.Error.Code != -32002 {
					t.Errorf("tasks/cancel historyLength %s: %+v, want -32002 (ended)", n, r.Error)
				}
			}
			if r := call("tasks/get", fmt.Sprintf(`{"id":%q,"historyLength":"0"}`, id)); r.Error != nil || len(historyTexts(r.Result)) != 0 {
				t.Errorf(`tasks/get historyLength "0": %+v, history %q, want none`, r.Error, historyTexts(r.Result))
			}
			for _, bad := range []string{`true`, `1.5`, `"x"`, `-1`, `"-1"`, `{}`} {
				for _, m := range []string{"tasks/get", "tasks/cancel", "tasks/resubscribe"} {
					r := call(m, fmt.Sprintf(`{"id":%q,"historyLength":%s}`, id, bad))
					if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "historyLength") || strings.Contains(r.Error.Message, "params.id") {
						t.Errorf("%s historyLength %s: %+v, want -32602 naming historyLength", m, bad, r.Error)
					}
				}
			}

			// A send's configuration.historyLength alike.
			for i, n := range []string{`"1"`, `1.0`} {
				cfg := fmt.Sprintf(`{"historyLength":%s,"blocking":false,"returnImmediately":true}`, n)
				msg := mustJSON(c.message(fmt.Sprintf("counts-cfg-%d-%s", i, v), "third", map[string]any{"contextId": ctxID}))
				r := c.rawCall(fmt.Sprintf(`{"jsonrpc":"2.0","id":8,"method":%q,"params":{"message":%s,"configuration":%s}}`, methodOf(v, "message/send"), msg, cfg), nil)
				if r.Error != nil {
					t.Errorf("send configuration %s: refused %d %s", cfg, r.Error.Code, r.Error.Message)
					continue
				}
				task := taskResult(t, v, r)
				if got := historyTexts(task); len(got) > 1 {
					t.Errorf("send configuration %s: history %q, want at most one message", cfg, got)
				}
				f := p.Offer()
				p.Accept(f.RunID)
				p.Complete(f.RunID, *f.ThreadID)
				h.WaitStatus(f.RunID, run.Completed)
			}
			r := c.rawCall(fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":%q,"params":{"message":%s,"configuration":{"historyLength":"x"}}}`,
				methodOf(v, "message/send"), mustJSON(c.message("counts-bad-"+v, "no", map[string]any{"contextId": ctxID}))), nil)
			if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "historyLength") {
				t.Errorf(`send configuration historyLength "x": %+v, want -32602 naming historyLength`, r.Error)
			}

			if v != "1.0" {
				return
			}
			// ListTasks: pageSize and historyLength as ProtoJSON sends them.
			r = call("ListTasks", fmt.Sprintf(`{"contextId":%q,"pageSize":"1","historyLength":"0"}`, ctxID))
			if r.Error != nil {
				t.Fatalf(`ListTasks pageSize "1": refused %d %s`, r.Error.Code, r.Error.Message)
			}
			tasks, _ := r.Result["tasks"].([]any)
			if len(tasks) != 1 || r.Result["nextPageToken"] == "" {
				t.Errorf(`ListTasks pageSize "1": %d tasks, next %v; want one and a next page`, len(tasks), r.Result["nextPageToken"])
			}
			for _, tk := range tasks {
				if got := historyTexts(tk.(map[string]any)); len(got) != 0 {
					t.Errorf(`ListTasks historyLength "0": history %q`, got)
				}
			}
			for _, bad := range []string{`{"contextId":%q,"pageSize":"x"}`, `{"contextId":%q,"historyLength":true}`,
				`{"contextId":5}`, `{"contextId":%q,"includeArtifacts":"yes"}`} {
				ps := strings.ReplaceAll(bad, "%q", `"`+ctxID+`"`)
				r := call("ListTasks", ps)
				if r.Error == nil || r.Error.Code != -32602 || strings.Contains(r.Error.Message, "Go struct") || strings.Contains(r.Error.Message, "json:") {
					t.Errorf("ListTasks %s: %+v, want -32602 in the door's own words", ps, r.Error)
				}
			}
		})
	}
}

// A text part whose text is missing or not a string is a malformed text
// part, refused -32602 naming it — not -32005 "only text parts are
// supported; got text", which tells the caller its text part is not one.
// A part of another kind is still -32005 naming its kind (doors.md §A2A
// step 7). Nothing is written either way.
func TestOutsideTextPartWithoutText(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	for _, v := range []string{"", "1.0"} {
		c := newClient(t, srv, p.Key, "echo", v)
		role := `"user"`
		if v == "1.0" {
			role = `"ROLE_USER"`
		}
		send := func(parts string) rpcResp {
			t.Helper()
			return c.rawCall(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":{"message":{"messageId":"tp","role":%s,"parts":%s}}}`,
				methodOf(v, "message/send"), role, parts), nil)
		}
		for _, parts := range []string{`[{"kind":"text"}]`, `[{"type":"text","text":5}]`, `[{"text":null}]`,
			`[{"text":"a"},{"kind":"text","text":["b"]}]`} {
			r := send(parts)
			if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "text") || strings.Contains(r.Error.Message, "only text parts") {
				t.Errorf("v%s parts %s: %+v, want -32602 naming the part's text", v, parts, r.Error)
			}
		}
		if r := send(`[{"kind":"file","file":{"uri":"https://example.com/a.png"}}]`); r.Error == nil || r.Error.Code != -32005 || !strings.Contains(r.Error.Message, "file") {
			t.Errorf("v%s a file part: %+v, want -32005 naming file", v, r.Error)
		}
	}
	if n := count(t, h, "runs"); n != 0 {
		t.Errorf("%d runs written", n)
	}
}
