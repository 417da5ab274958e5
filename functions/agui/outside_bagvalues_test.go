package agui_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// The caller's bag is kept with the thread it opens, in a form that takes
// JSON values only as PostgreSQL's jsonb holds them: a lone surrogate
// escape (\ud800, which a strict reader calls malformed and Go reads as
// U+FFFD) or a number past numeric's range cannot be stored. That is the
// caller's input: 400 bad_request, nothing written; not 500 "internal
// error".
func TestOutsideBagValuesPostgreSQLCannotHold(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	for name, bag := range map[string]string{
		"a lone surrogate":      `{"note":"a\ud800b"}`,
		"a number past numeric": `{"n":1e999999}`,
	} {
		t.Run(name, func(t *testing.T) {
			body := `{"threadId":"t","runId":"r","messages":[{"id":"u1","role":"user","content":"hi"}],"forwardedProps":` + bag + `}`
			code, _, got := jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), body, nil)
			if code != 400 || errCode(got) != door.CodeBadRequest {
				t.Fatalf("got %d %v, want 400 %s", code, got, door.CodeBadRequest)
			}
			if n := runCount(t, h); n != 0 {
				t.Fatalf("%d runs written", n)
			}
		})
	}
}
