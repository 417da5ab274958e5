package authorizer

import (
	"context"
	"errors"
	"testing"
)

// A time claim past what a 64-bit second count holds (1e19) was converted
// with int64(float64), whose result Go leaves to the CPU: on amd64 it wraps
// to the far past, so a token "not valid before" 1e19 (or "issued" then)
// verified at once; on arm64 — what the Lambdas are built for — it
// saturates to the far future, so an exp of 1e19 never expired. The same
// token must get the same answer everywhere: a NumericDate outside years
// 1–9999 is refused.
func TestOutsideTimeClaimsOutOfRangeAreRefused(t *testing.T) {
	is := newIssuer(t)
	a := newAuth(t, is, false)
	for name, over := range map[string]map[string]any{
		"nbf 1e19":  {"nbf": 1e19},
		"iat 1e19":  {"iat": 1e19},
		"exp 1e19":  {"exp": 1e19},
		"exp 1e300": {"exp": 1e300},
		"nbf -1e19": {"nbf": -1e19},
	} {
		t.Run(name, func(t *testing.T) {
			tok := is.token(t, "EdDSA", "ed", claims(over))
			out, err := a.Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " + tok}))
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("a token with %v: %+v %v, want 401", over, out, err)
			}
		})
	}
	// Dates in range still verify.
	if _, err := a.Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " +
		is.token(t, "EdDSA", "ed", claims(map[string]any{"nbf": now.Unix() - 10, "exp": float64(now.Unix()) + 3600.5}))})); err != nil {
		t.Fatal(err)
	}
}
