package authorizer

import (
	"context"
	"testing"
)

// The Authorization scheme is matched in any case (RFC 9110 §11.1:
// "bearer" is "Bearer"), as the KYOK door matches it
// (TestOutsideBearerSchemeInAnyCase): a caller whose HTTP client writes
// the scheme in lower case, with a token that verifies, was refused 401
// at the gateway.
func TestOutsideBearerSchemeInAnyCase(t *testing.T) {
	is := newIssuer(t)
	a := newAuth(t, is, false)
	for _, scheme := range []string{"bearer", "BEARER", "Bearer"} {
		t.Run(scheme, func(t *testing.T) {
			out, err := a.Authorize(context.Background(), request("POST", map[string]string{
				"Authorization": scheme + " " + is.token(t, "EdDSA", "ed", claims(nil))}))
			if err != nil || out.Context[ContextKey] != callerKey || out.Context[ContextVia] != "jwt" {
				t.Fatalf("Authorization: %s <valid token>: %+v %v, want the token's key", scheme, out, err)
			}
		})
	}
}
