package deploytest

import (
	"encoding/json"
	"testing"

	"github.com/funduq/funduq-go/functions/door"
)

// What API Gateway answers by itself, before any door runs, is a caller's
// answer too. Its defaults are not the doors': a route or method the API
// does not have is 403 {"message":"Missing Authentication Token"} (the
// local doors server: 404 not_found), and the authorizer's refusal,
// throttling, an oversized request and a failed integration answer
// {"message":…}, which a client reading the doors' {"error":{"code"}}
// envelope cannot tell apart. Each gateway response carries the doors'
// envelope with a code, and an unknown route is 404 not_found as locally.
func TestGatewayResponsesSpeakTheDoorsErrors(t *testing.T) {
	c := loadTemplate(t, "template.yaml")
	gr := get(c.root, "Resources", "DoorsApi", "Properties", "GatewayResponses")
	for typ, want := range map[string]struct {
		status, code string
	}{
		"MISSING_AUTHENTICATION_TOKEN": {"404", door.CodeNotFound},
		"UNAUTHORIZED":                 {"401", "unauthorized"},
		"THROTTLED":                    {"429", "rate_limited"},
		"REQUEST_TOO_LARGE":            {"413", door.CodeBodyTooLarge},
		"DEFAULT_4XX":                  {"", door.CodeBadRequest},
		"DEFAULT_5XX":                  {"", door.CodeInternal},
	} {
		t.Run(typ, func(t *testing.T) {
			r := get(gr, typ)
			if r == nil {
				t.Fatalf("DoorsApi answers %s with API Gateway's default body, not the doors' error envelope", typ)
			}
			if s := get(r, "StatusCode"); want.status != "" && (s == nil || s.Value != want.status) {
				t.Errorf("%s: StatusCode %v, want %s", typ, s, want.status)
			}
			tpl := get(r, "ResponseTemplates", "application/json")
			if tpl == nil {
				t.Fatalf("%s: no application/json template", typ)
			}
			var env struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(tpl.Value), &env); err != nil || env.Error.Code != want.code || env.Error.Message == "" {
				t.Errorf("%s: body %q, want {\"error\":{\"code\":%q,\"message\":…}} (%v)", typ, tpl.Value, want.code, err)
			}
		})
	}
}
