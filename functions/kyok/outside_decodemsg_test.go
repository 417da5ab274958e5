package kyok_test

import (
	"fmt"
	"strings"
	"testing"
)

// An answer frame whose member has the wrong JSON type is refused in the
// frame's own words — which member, what it must be — not in the names of
// funduq's Go types, which an LLM provider written in another language
// cannot act on (as a register's refusal already says, core/wire).
func TestOutsideMistypedAnswerIsRefusedInWireTerms(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x5f)
	for f, want := range map[string]string{
		`{"type":"error","requestId":"r1","message":5}`:  "error frame does not decode: message must be a string (got number)",
		`{"type":"chunk","requestId":"r1","message":[]}`: "chunk frame does not decode: message must be a string (got array)",
	} {
		l.raw(f)
		m := l.next("error")
		if msg := fmt.Sprint(m["message"]); msg != want || strings.Contains(msg, "Go ") {
			t.Errorf("%s: answered %q, want %q", f, msg, want)
		}
	}
}
