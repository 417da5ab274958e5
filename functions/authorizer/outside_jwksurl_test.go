package authorizer

import "testing"

// http is taken for the key set only to this machine (a test's or a
// sidecar's key set): a URL that merely looks like it — a host named
// localhost-something, loopback as userinfo or fragment, 0.0.0.0 — is
// refused, and every https URL with a host is taken (docs/design.md §The
// authorizer's cold start and its key set).
func TestOutsideKeySetURLOverHTTPOnlyToThisMachine(t *testing.T) {
	cfg := func(u string) Config {
		return Config{JWKSURL: u, Issuer: "https://idp.example", Audience: "funduq", KeyClaim: "funduq_key"}
	}
	for _, u := range []string{
		"http://localhost.evil.example/jwks", "http://localhost@evil.example/jwks", "http://127.0.0.1@evil.example/jwks",
		"http://evil.example#@127.0.0.1/jwks", "http://evil.example?@127.0.0.1/jwks", "http://127.0.0.1.evil.example/jwks",
		"http://0.0.0.0/jwks", "http://[::]/jwks", "http://[::ffff:8.8.8.8]/jwks", "HTTP://evil.example/jwks",
		"http:///jwks", "http://:80/jwks", "https://", "//evil.example/jwks", "idp.example/jwks",
	} {
		if err := cfg(u).Check(); err == nil {
			t.Errorf("FUNDUQ_AUTH_JWKS_URL %s was taken", u)
		}
	}
	for _, u := range []string{
		"http://localhost:8080/jwks", "http://127.0.0.1/jwks", "http://127.0.0.2:9000/jwks", "http://[::1]:9000/jwks",
		"https://idp.example/.well-known/jwks.json", "HTTPS://idp.example/jwks", "https://idp.example:8443/jwks",
	} {
		if err := cfg(u).Check(); err != nil {
			t.Errorf("FUNDUQ_AUTH_JWKS_URL %s: %v", u, err)
		}
	}
}
