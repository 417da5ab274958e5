package a2a_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// The request metadata opening a context is kept in jsonb: a lone
// surrogate escape or a number past numeric's range in it is the caller's
// input, -32602 with nothing written, not -32603 "internal error".
func TestOutsideMetadataValuesPostgreSQLCannotHold(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	for _, md := range []string{`{"note":"a\ud800b"}`, `{"n":1e999999}`} {
		body := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"hi"}]},"configuration":{"blocking":false},"metadata":` + md + `}}`
		r := c.rawCall(body, nil)
		if r.Error == nil || r.Error.Code != a2a.CodeInvalidParams {
			t.Fatalf("metadata %s: got %+v %v, want -32602", md, r.Error, r.Result)
		}
	}
	if n := count(t, h, "runs"); n != 0 {
		t.Fatalf("%d runs written", n)
	}
}

// A key of the request metadata is kept as the caller wrote it like a
// value is: a lone surrogate escape in one (Go reads it as U+FFFD, so the
// key stored and relayed would not be the caller's) is -32602 naming it,
// nothing written, as one in a value is — opening a context or on one
// that exists, at any depth.
func TestOutsideMetadataKeysPostgreSQLCannotHold(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	got := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
	opened := c.send(c.message("m0", "hi", nil), nil)
	recv(t, got, "the first task")
	ctxID, _ := opened["contextId"].(string)
	for _, on := range []string{"", ctxID} {
		for name, md := range map[string]string{
			"a key":             `{"\ud800":1}`,
			"a low half as key": `{"a\udc00b":"x"}`,
			"a nested key":      `{"a":{"\ud800":1}}`,
		} {
			t.Run("context "+on+"/"+name, func(t *testing.T) {
				runs, threads := count(t, h, "runs"), count(t, h, "threads")
				ctx := ""
				if on != "" {
					ctx = `"contextId":"` + on + `",`
				}
				body := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m-` + name + `",` + ctx +
					`"role":"user","parts":[{"kind":"text","text":"hi"}]},"configuration":{"blocking":false},"metadata":` + md + `}}`
				r := c.rawCall(body, nil)
				if r.Error == nil || r.Error.Code != a2a.CodeInvalidParams || !strings.Contains(r.Error.Message, "surrogate") {
					t.Fatalf("got %+v %v, want -32602 naming the surrogate", r.Error, r.Result)
				}
				if n, th := count(t, h, "runs"), count(t, h, "threads"); n != runs || th != threads {
					t.Fatalf("written: runs %d→%d, threads %d→%d", runs, n, threads, th)
				}
			})
		}
	}
	p.None()
}
