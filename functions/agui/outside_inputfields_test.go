package agui_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/door"
)

// The rest of a caller's RunAgentInput — state, tools, context, resume —
// reaches the agent as the caller wrote it or not at all, as its messages
// and its bag do. Each was relayed as sent, with a lone surrogate escape,
// an escaped NUL or a number past PostgreSQL's numeric in it: funduq
// stores no provider event holding them (D18), so an agent echoing the
// state in a STATE_SNAPSHOT had its run failed malformed_event, and an
// answer's resume reopened the paused run with them. Each is refused 400
// bad_request naming the field and the reason, in a key or a value at any
// depth, nothing written, nothing offered, on a new thread and on a paused
// one alike.
func TestOutsideInputFieldsFunduqCannotCarry(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	url := aguiURL(srv, p.Key, "echo")
	s := openStream(t, "POST", url, input("t0", "r0", ""), nil)
	paused := pause(t, h, p, s)
	const (
		tool    = `{"name":"t","description":"d","parameters":{"type":"object"}}`
		ctx     = `{"description":"d","value":"v"}`
		answers = `"resume":[{"interruptId":"int1","status":"resolved","payload":{"approved":true}}]`
	)
	// On the paused thread each body is a whole answer (the tool result
	// and the interrupt's resume); on a new thread an ordinary first turn.
	body := func(thread, runID, state, tools, context, resume string) string {
		msg := toolTC2
		if thread != *paused.ThreadID {
			msg, resume = `{"id":"u1","role":"user","content":"hi"}`, `"resume":null`
		}
		return fmt.Sprintf(`{"threadId":%q,"runId":%q,"state":%s,"messages":[%s],"tools":%s,"context":%s,"forwardedProps":{},%s}`,
			thread, runID, state, msg, tools, context, resume)
	}
	for _, thread := range []string{"t-new", *paused.ThreadID} {
		for _, c := range []struct{ name, state, tools, context, resume, field, why string }{
			{"a state key", `{"\ud800":"a"}`, `[]`, `[]`, answers, "state", "surrogate"},
			{"a state value", `{"a":"a\u0000b"}`, `[]`, `[]`, answers, "state", "NUL"},
			{"a state number", `{"n":1e999999}`, `[]`, `[]`, answers, "state", "numeric"},
			{"a state string", `"a\udc00"`, `[]`, `[]`, answers, "state", "surrogate"},
			{"a nested tool key", `{}`, `[` + tool + `,{"name":"u","parameters":{"\ud800":{}}}]`, `[]`, answers, "tools[1]", "surrogate"},
			{"a context value", `{}`, `[]`, `[{"description":"d","value":"a\u0000"}]`, answers, "context[0]", "NUL"},
			{"a context key", `{}`, `[]`, `[` + ctx + `,{"description":"d","\udbff":"v"}]`, answers, "context[1]", "surrogate"},
			{"a resume payload", `{}`, `[]`, `[]`, `"resume":[{"interruptId":"int1","status":"resolved","payload":{"n":1e999999}}]`, "resume[0]", "numeric"},
			{"a resume key", `{}`, `[]`, `[]`, `"resume":[{"interruptId":"int1","status":"resolved","\ud800":1}]`, "resume[0]", "surrogate"},
		} {
			if thread == "t-new" && strings.HasPrefix(c.field, "resume") {
				continue // a resume on a thread funduq does not know answers nothing
			}
			t.Run(thread+"/"+c.name, func(t *testing.T) {
				runs, threads := runCount(t, h), threadCount(t, h)
				code, _, got := jsonCall(t, "POST", url, body(thread, "r-"+c.name, c.state, c.tools, c.context, c.resume), nil)
				e, _ := got["error"].(map[string]any)
				msg, _ := e["message"].(string)
				if code != 400 || errCode(got) != door.CodeBadRequest || !strings.Contains(msg, c.field) || !strings.Contains(msg, c.why) {
					t.Fatalf("got %d %v, want 400 %s naming %s and the %s", code, got, door.CodeBadRequest, c.field, c.why)
				}
				if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
					t.Fatalf("written: runs %d→%d, threads %d→%d", runs, r, threads, th)
				}
				if st := h.Run(paused.RunID).Status; st != run.InputRequired {
					t.Fatalf("the paused run is %s, want it still waiting for its answer", st)
				}
			})
		}
	}
	p.None()

	// An escaped pair is a character like any other: the answer is taken,
	// its state, tools, context and resume offered as sent.
	pair := `{"\ud83d\ude00":"smile \ud83d\ude00"}`
	s = openStream(t, "POST", url, body(*paused.ThreadID, "r-pair", pair, `[{"name":"t","\ud83d\ude00":1}]`, `[{"value":"\ud83d\ude00"}]`,
		`"resume":[{"interruptId":"int1","status":"resolved","payload":`+pair+`}]`), nil)
	f := p.Offer()
	var in struct {
		State   map[string]any   `json:"state"`
		Tools   []map[string]any `json:"tools"`
		Context []map[string]any `json:"context"`
		Resume  []map[string]any `json:"resume"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil {
		t.Fatalf("run input %s: %v", f.RunInput, err)
	}
	smile := "smile \U0001F600"
	if in.State["\U0001F600"] != smile || len(in.Tools) != 1 || in.Tools[0]["\U0001F600"] != float64(1) ||
		len(in.Context) != 1 || in.Context[0]["value"] != "\U0001F600" ||
		len(in.Resume) != 1 || in.Resume[0]["payload"].(map[string]any)["\U0001F600"] != smile {
		t.Errorf("offered %s, want the caller's keys and text", f.RunInput)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
}
