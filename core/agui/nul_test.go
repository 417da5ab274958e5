package agui_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/funduq/funduq-go/core/agui"
)

// An event PostgreSQL cannot hold is malformed at once: a NUL escape
// anywhere (jsonb refuses \u0000, and a pause's interrupts are jsonb), an
// escaped surrogate without its pair and a number beyond numeric's range
// (jsonb refuses both), or bytes that are not UTF-8. An escaped backslash
// before "u0000" is text, not a NUL.
func TestValidateRefusesTextPostgreSQLCannotHold(t *testing.T) {
	for _, c := range []struct {
		name, ev  string
		malformed bool
	}{
		{"NUL in a delta", `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a\u0000b"}`, true},
		{"NUL in an interrupt id", `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i\u0000"}]}}`, true},
		{"NUL in an unknown event's key", `{"type":"X_CUSTOM","k\u0000":1}`, true},
		{"NUL after an escaped quote", `{"type":"X_CUSTOM","v":"\"\u0000"}`, true},
		{"escaped backslash, then u0000", `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a\\u0000b"}`, false},
		{"two escaped backslashes, then a NUL", `{"type":"X_CUSTOM","v":"\\\\\u0000"}`, true},
		{"U+0001 is fine", `{"type":"X_CUSTOM","v":"\u0001"}`, false},
		{"not UTF-8", "{\"type\":\"X_CUSTOM\",\"v\":\"\xff\xfe\"}", true},
		{"a lone high surrogate in an interrupt", `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i\ud800","reason":"r"}]}}`, true},
		{"a lone low surrogate", `{"type":"X_CUSTOM","v":"\udc00x"}`, true},
		{"a surrogate pair", `{"type":"X_CUSTOM","v":"\ud83d\ude00"}`, false},
		{"a number numeric cannot hold", `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r","payload":1e999999}]}}`, true},
		{"a number too small for numeric", `{"type":"X_CUSTOM","v":1e-20000}`, true},
		{"an ordinary large number", `{"type":"X_CUSTOM","v":-1.5e300}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := agui.Validate(json.RawMessage(c.ev))
			if got := errors.Is(err, agui.ErrMalformed); got != c.malformed {
				t.Fatalf("malformed %v (%v), want %v", got, err, c.malformed)
			}
		})
	}
}
