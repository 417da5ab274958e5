package authorizer

import (
	"context"
	"errors"
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

// A key set read back with no key funduq can use (an identity provider's
// glitch: `{"keys":[]}`, or only encryption keys) is a failed read, not a
// new set: the keys held go on verifying, as through an outage. Taken as
// the new set, it refused every caller's token until the next read.
func TestOutsideEmptyKeySetKeepsTheKeysHeld(t *testing.T) {
	is := newIssuer(t)
	var empty atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if empty.Load() {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"keys":[{"kty":"RSA","use":"enc","kid":"x","n":"AQAB","e":"AQAB"}]}`))
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
	if err := call(); err != nil {
		t.Fatalf("first call: %v", err)
	}
	empty.Store(true)
	clock = clock.Add(11 * time.Minute) // past the 10-minute TTL: read again
	if err := call(); err != nil {
		t.Fatalf("after the key set came back with no usable key: %v (the keys held still verify)", err)
	}
}

// With no keys held yet (a cold start while the identity provider is
// down), a failed read is not tried again by every call either: each
// would wait for its own failure, up to the client's 5 s on a hung
// provider, and every call fails all the same. It is tried again a few
// seconds on, and a recovered provider is used then.
func TestOutsideKeySetDownAtColdStartIsNotAskedOnEveryCall(t *testing.T) {
	is := newIssuer(t)
	var failing atomic.Bool
	var asked atomic.Int32
	failing.Store(true)
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
	for i := range 3 {
		if err := call(); err == nil || errors.Is(err, ErrUnauthorized) {
			t.Fatalf("call %d with the key set down and no keys held: %v, want the error API Gateway answers 500 (not decided), not 401", i, err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("key set asked %d times for three calls in the same second, want once", n)
	}
	failing.Store(false)
	clock = clock.Add(6 * time.Second)
	if err := call(); err != nil || asked.Load() != 2 {
		t.Fatalf("six seconds on, the provider back: %v, key set asked %d times, want it asked again (2)", err, asked.Load())
	}
}
