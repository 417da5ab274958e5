package authorizer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// Once the cached key set is older than its TTL and the identity provider
// fails to serve it, the authorizer goes on with the keys it holds — and
// asks again at most once per MinRefresh, not on every bearer call: each
// call waited for its own failing fetch (up to the client's 5 s on a hung
// provider), so every caller paid that wait for as long as the outage
// lasted.
func TestOutsideKeySetOutageIsNotAskedOnEveryCall(t *testing.T) {
	is := newIssuer(t)
	var failing atomic.Bool
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		is.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	clock := now
	a, err := New(Config{JWKSURL: srv.URL, Issuer: "https://idp.example", Audience: "funduq", KeyClaim: "funduq_key",
		Leeway: time.Minute}, Options{Client: srv.Client(), Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	call := func() error {
		_, err := a.Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " +
			is.token(t, "EdDSA", "ed", claims(map[string]any{"exp": clock.Add(time.Hour).Unix(), "iat": clock.Unix()}))}))
		return err
	}
	if err := call(); err != nil || asked.Load() != 1 {
		t.Fatalf("first call: %v, key set asked %d times", err, asked.Load())
	}
	failing.Store(true)
	clock = clock.Add(11 * time.Minute) // past the 10-minute TTL
	for i := range 3 {
		if err := call(); err != nil {
			t.Fatalf("call %d during the outage: %v (the cached keys still verify)", i, err)
		}
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("key set asked %d times for three calls within a minute of the outage, want once more (2)", n)
	}
	clock = clock.Add(61 * time.Second)
	failing.Store(false)
	if err := call(); err != nil || asked.Load() != 3 {
		t.Fatalf("a minute on: %v, key set asked %d times, want it asked again (3)", err, asked.Load())
	}
}
