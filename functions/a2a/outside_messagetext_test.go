package a2a_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A caller's message reaches the agent as the caller wrote it, or not at
// all. Go reads a lone surrogate escape as U+FFFD, so a text part "a\ud800b"
// was offered to the provider as "a\ufffdb": text the caller never sent.
// What funduq cannot carry in a message is refused as it is in the
// request's metadata, in a key or a value of any member (a part's text,
// the message's own metadata) — a lone surrogate escape, an escaped NUL, a
// number past PostgreSQL's numeric — -32602 naming the message and the
// reason, nothing written, nothing offered; opening a context and on one
// that exists alike.
func TestOutsideMessageKeysAndValuesFunduqCannotCarry(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	got := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
	opened := c.send(c.message("m0", "hi", nil), nil)
	recv(t, got, "the first task")
	ctxID, _ := opened["contextId"].(string)
	for _, on := range []string{"", ctxID} {
		for _, tc := range []struct{ name, parts, metadata, why string }{
			{"a text", `[{"kind":"text","text":"a\ud800b"}]`, ``, "surrogate"},
			{"the second part", `[{"kind":"text","text":"hi"},{"kind":"text","text":"\udc00"}]`, ``, "surrogate"},
			{"a metadata key", `[{"kind":"text","text":"hi"}]`, `{"\ud800":1}`, "surrogate"},
			{"a nested metadata key", `[{"kind":"text","text":"hi"}]`, `{"a":{"b\udbffc":1}}`, "surrogate"},
			{"a metadata value", `[{"kind":"text","text":"hi"}]`, `{"note":"a\ud800b"}`, "surrogate"},
			{"a NUL", `[{"kind":"text","text":"a\u0000b"}]`, ``, "NUL"},
			{"a number past numeric", `[{"kind":"text","text":"hi"}]`, `{"n":1e999999}`, "numeric"},
		} {
			t.Run("context "+on+"/"+tc.name, func(t *testing.T) {
				runs, threads := count(t, h, "runs"), count(t, h, "threads")
				ctx := ""
				if on != "" {
					ctx = `"contextId":"` + on + `",`
				}
				md := ""
				if tc.metadata != "" {
					md = `,"metadata":` + tc.metadata
				}
				body := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m-` + tc.name + `",` + ctx +
					`"role":"user","parts":` + tc.parts + md + `},"configuration":{"blocking":false}}}`
				r := c.rawCall(body, nil)
				if r.Error == nil || r.Error.Code != a2a.CodeInvalidParams ||
					!strings.Contains(r.Error.Message, "params.message") || !strings.Contains(r.Error.Message, tc.why) {
					t.Fatalf("got %+v %v, want -32602 naming params.message and the %s", r.Error, r.Result, tc.why)
				}
				if n, th := count(t, h, "runs"), count(t, h, "threads"); n != runs || th != threads {
					t.Fatalf("written: runs %d→%d, threads %d→%d", runs, n, threads, th)
				}
			})
		}
	}
	p.None()

	// An escaped pair is a character like any other: taken, and offered as
	// the same text and metadata.
	got = playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
	body := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m-pair",` +
		`"role":"user","parts":[{"kind":"text","text":"smile \ud83d\ude00"}],"metadata":{"\ud83d\ude00":1}}}}`
	if r := c.rawCall(body, nil); r.Error != nil {
		t.Fatalf("a message with an escaped pair: %+v", r.Error)
	}
	f := recv(t, got, "the offer")
	var in struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil || len(in.Messages) != 1 {
		t.Fatalf("run input %s: %v", f.RunInput, err)
	}
	m := in.Messages[0]
	md, _ := m["metadata"].(map[string]any)
	if m["content"] != "smile \U0001F600" || md["\U0001F600"] != float64(1) {
		t.Errorf("offered %v, want the caller's text and metadata", m)
	}
}
