package authorizer

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The key set URL must be https (or http to this machine): fetched in
// clear, anyone on the path could serve keys of their own and mint a token
// for any caller key (docs/design.md §Deployment). An https key set that
// redirects to plain http is that same clear fetch, one hop later: the
// authorizer must not follow it. The identity provider here answers its
// https URL with a redirect to http://keys.idp.example/jwks, and whoever
// is on the path there serves a key set of their own.
func TestOutsideKeySetRedirectToPlainHTTPIsNotFollowed(t *testing.T) {
	onPath := newIssuer(t) // the key set served in clear, by whoever is on the path
	idp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/jwks":
			http.Redirect(w, r, "http://keys.idp.example/jwks", http.StatusFound)
		case "/moved":
			// An https hop is as safe as the first one.
			onPath.srv.Config.Handler.ServeHTTP(w, r)
		default:
			http.Redirect(w, r, "/moved", http.StatusMovedPermanently)
		}
	}))
	t.Cleanup(idp.Close)
	client := idp.Client()
	tr := client.Transport.(*http.Transport).Clone()
	// The network: keys.idp.example is reached through the path the
	// stranger controls (the clear key set's listener).
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "keys.idp.example:") {
			addr = onPath.srv.Listener.Addr().String()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)

	auth := func(path string) *Authorizer {
		a, err := New(Config{JWKSURL: idp.URL + path, Issuer: "https://idp.example", Audience: "funduq", KeyClaim: "funduq_key",
			Leeway: time.Minute}, Options{Client: client, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	tok := onPath.token(t, "EdDSA", "ed", claims(nil))
	out, err := auth("/jwks").Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " + tok}))
	if err == nil {
		t.Errorf("a token signed with the key set served in clear after an https redirect: %+v, want no Allow", out.PolicyDocument)
	}
	if n := onPath.fetches.Load(); n != 0 {
		t.Errorf("the key set was read in clear %d times after an https redirect to http", n)
	}

	// A redirect that stays on https is followed.
	if _, err := auth("/old").Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " + tok})); err != nil {
		t.Errorf("a key set moved to another https URL: %v", err)
	}
}
