package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
)

// A completion behind the authorizer whose body is not the one its
// presenter signature covers is refused before the door in the KYOK
// door's own (OpenAI-style) envelope, as its other refusals are: 401 with
// error.code and error.type presenter_body_mismatch. On main it was the
// doors' generic envelope, without the type an OpenAI client reads.
func TestOutsideBodyOtherThanTheSignedOneInTheKyokEnvelope(t *testing.T) {
	signed := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	resp, b := completionThroughAPIGateway(t, storetest.URL(t), strings.Replace(signed, `"hi"`, `"bye"`, 1),
		map[string]any{door.AuthorizerKeyField: strings.Repeat("ab", 32), door.AuthorizerBodyField: identity.SHA256Hex([]byte(signed))})
	var e struct {
		Error struct{ Code, Type, Message string }
	}
	if json.Unmarshal(b, &e) != nil || resp.StatusCode != 401 || e.Error.Code != door.CodeBodyMismatch ||
		e.Error.Type != door.CodeBodyMismatch || e.Error.Message == "" {
		t.Fatalf("another body than the signed one: %d %s; want 401 %s in the KYOK envelope (code and type)",
			resp.StatusCode, b, door.CodeBodyMismatch)
	}
}
