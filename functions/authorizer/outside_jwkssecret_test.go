package authorizer

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/internal/syncbuf"
)

// A key set behind basic auth carries its password in FUNDUQ_AUTH_JWKS_URL
// (https://user:password@idp/jwks). Nothing secret is logged
// (docs/design.md §Logs): neither the cold start's refusal of such a URL
// nor the error line of a fetch that fails names the password.
func TestOutsideKeySetPasswordIsNeverLogged(t *testing.T) {
	const password = "hunter2-jwks-password"
	for _, raw := range []string{"http://funduq:" + password + "@idp.example/jwks", "https://funduq:" + password + "@/jwks"} {
		_, err := ParseConfig(map[string]string{"FUNDUQ_AUTH_JWKS_URL": raw,
			"FUNDUQ_AUTH_JWT_ISSUER": "https://idp.example", "FUNDUQ_AUTH_JWT_AUDIENCE": "funduq"})
		if err == nil || strings.Contains(err.Error(), password) {
			t.Errorf("the refusal of %s: %v, want one that does not name the password", raw, err)
		}
	}

	idp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(idp.Close)
	u, _ := url.Parse(idp.URL + "/jwks")
	u.User = url.UserPassword("funduq", password)
	var logs syncbuf.Buffer
	a, err := New(Config{JWKSURL: u.String(), Issuer: "https://idp.example", Audience: "funduq", KeyClaim: "funduq_key",
		Leeway: time.Minute}, Options{Client: idp.Client(), Now: func() time.Time { return now },
		Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	is := newIssuer(t)
	_, err = a.Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " + is.token(t, "EdDSA", "ed", claims(nil))}))
	if err == nil {
		t.Fatal("a bearer call with the key set down was allowed")
	}
	if out := logs.String(); !strings.Contains(out, "could not decide") || strings.Contains(out, password) || strings.Contains(err.Error(), password) {
		t.Errorf("a failed key set fetch: %v, logged:\n%s\nwant an error line that does not name the password", err, out)
	}
}
