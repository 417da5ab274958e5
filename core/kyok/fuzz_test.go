package kyok_test

import (
	"encoding/json"
	"testing"

	"github.com/funduq/funduq-go/core/kyok"
)

// FuzzValidateChatRequest: the KYOK door's body check never panics, and a
// body it accepts is a JSON object with a model.
func FuzzValidateChatRequest(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, `{"model":"m","messages":[]}`,
		`{"model":"","messages":[{"role":"user"}]}`, `{"model":"m","messages":[{"role":7}],"stream":true}`, `[]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if kyok.ValidateChatRequest(b) != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil || m == nil {
			t.Fatalf("accepted %q", b)
		}
		_ = kyok.StreamRequested(b)
		if kyok.ModelOf(b) == "" {
			t.Fatalf("accepted %q without a model", b)
		}
	})
}

// FuzzValidateChunk: an LLM provider's chunk check never panics.
func FuzzValidateChunk(f *testing.F) {
	for _, s := range []string{`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"}}]}`, `{}`, `[]`, `{"choices":7}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if kyok.ValidateChunk(b) == nil && !json.Valid(b) {
			t.Fatalf("accepted %q", b)
		}
	})
}

// FuzzParseOptIn: a caller's KYOK opt-in (forwardedProps.kyok) never
// panics the parser, and stripping its context leaves JSON.
func FuzzParseOptIn(f *testing.F) {
	for _, s := range []string{`{"kyok":{"llmProvider":{"providerKey":"k","name":"n"},"context":{"apiKey":"s"}}}`, `{"kyok":null}`, `{"kyok":[]}`, `7`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		_, ok, _ := kyok.ParseOptIn(b)
		if ok {
			if s := kyok.StripContext(b); !json.Valid(s) {
				t.Fatalf("stripped %q to %q", b, s)
			}
		}
	})
}
