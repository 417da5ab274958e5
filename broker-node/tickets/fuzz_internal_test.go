package tickets

import (
	"testing"

	"github.com/funduq/funduq-go/core/identity"
)

// FuzzParseTicketRequest: a POST /tickets body either names one canonical
// public key or is refused with a message; never both, never a panic.
func FuzzParseTicketRequest(f *testing.F) {
	k := "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
	for _, s := range []string{`{"publicKey":"` + k + `"}`, `{"public_key":"` + k + `"}`, `{"publicKey":"` + k + `","publicKey":"x"}`,
		`{"publicKey":7}`, `null`, `{}`, "{\"publicKey\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		key, msg := parseBody(b)
		if (key == "") == (msg == "") {
			t.Fatalf("key %q msg %q", key, msg)
		}
		if key != "" {
			if _, err := identity.ParsePublicKey(key); err != nil {
				t.Fatalf("accepted key %q: %v", key, err)
			}
		}
	})
}
