package kyok_test

import (
	"strings"
	"testing"
)

// A register or deleteModel carrying what PostgreSQL cannot store — a NUL
// in a model name, a NUL escape, a lone surrogate or an out-of-range number
// in the metadata — is refused as not validating, never as funduq's own
// passing trouble ("try again" would have the LLM provider retry for ever
// what can never land); the link stays usable.
func TestOutsideUnstorableRegisterIsRefusedAsInvalid(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x5b)
	for _, f := range []string{
		`{"type":"register","models":["gpt\u0000x"]}`,
		`{"type":"register","models":["gpt-4"],"metadata":{"terms":"a\u0000b"}}`,
		`{"type":"register","models":["gpt-4"],"metadata":{"terms":"\ud800"}}`,
		`{"type":"register","models":["gpt-4"],"metadata":{"price":1e999999}}`,
	} {
		l.raw(f)
		m := l.next("error")
		if msg, _ := m["message"].(string); !strings.HasPrefix(msg, "register does not validate") {
			t.Errorf("%s: answered %v", f, m)
		}
	}
	l.raw(`{"type":"deleteModel","name":"gpt\u0000x"}`)
	if m := l.next("error"); m["message"] != "no such model" {
		t.Errorf("deleteModel with a NUL: answered %v", m)
	}
	l.raw(`{"type":"register","models":["gpt-4"],"metadata":{"terms":"fine"}}`)
	l.next("registered")
}
