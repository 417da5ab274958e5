package a2a_test

import (
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
