package a2a_test

import (
	"encoding/json"
	"testing"

	"github.com/funduq/funduq-go/functions/a2a"
)

// FuzzParseSendParams: message/send params from a caller either parse or
// are refused with a JSON-RPC error; never a panic.
func FuzzParseSendParams(f *testing.F) {
	for _, s := range []string{`{"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"hi"}]}}`,
		`{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}],"contextId":"c","metadata":{"actorChain":[]}}}`,
		`{"message":null}`, `{"message":{"parts":7}}`, `[]`, `{"configuration":{"blocking":"yes"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		_, e := a2a.ParseSendParams(b)
		if e != nil && e.Code == 0 {
			t.Fatalf("refusal without a code: %+v", e)
		}
	})
}
