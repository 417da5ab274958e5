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
	h := newKeySetHost(t)
	if err := h.call(); err != nil || h.asked.Load() != 1 {
		t.Fatalf("first call: %v, key set asked %d times", err, h.asked.Load())
	}
	h.down.Store(true)
	h.clock = h.clock.Add(11 * time.Minute) // past the 10-minute TTL
	for i := range 3 {
		if err := h.call(); err != nil {
			t.Fatalf("call %d during the outage: %v (the cached keys still verify)", i, err)
		}
	}
	if n := h.asked.Load(); n != 2 {
		t.Fatalf("key set asked %d times for three calls within a minute of the outage, want once more (2)", n)
	}
	h.clock = h.clock.Add(61 * time.Second)
	h.down.Store(false)
	if err := h.call(); err != nil || h.asked.Load() != 3 {
		t.Fatalf("a minute on: %v, key set asked %d times, want it asked again (3)", err, h.asked.Load())
	}
}

// A key set read back with no key funduq can use (an identity provider's
// glitch: `{"keys":[]}`, or only encryption keys) is a failed read, not a
// new set: the keys held go on verifying, as through an outage. Taken as
// the new set, it refused every caller's token until the next read.
func TestOutsideEmptyKeySetKeepsTheKeysHeld(t *testing.T) {
	h := newKeySetHost(t)
	if err := h.call(); err != nil {
		t.Fatalf("first call: %v", err)
	}
	h.empty.Store(true)
	h.clock = h.clock.Add(11 * time.Minute) // past the 10-minute TTL: read again
	if err := h.call(); err != nil {
		t.Fatalf("after the key set came back with no usable key: %v (the keys held still verify)", err)
	}
}

// With no keys held yet (a cold start while the identity provider is
// down), a failed read is not tried again by every call either: each
// would wait for its own failure, up to the client's 5 s on a hung
// provider, and every call fails all the same. It is tried again a few
// seconds on, and a recovered provider is used then.
func TestOutsideKeySetDownAtColdStartIsNotAskedOnEveryCall(t *testing.T) {
	h := newKeySetHost(t)
	h.down.Store(true)
	for i := range 3 {
		if err := h.call(); err == nil || errors.Is(err, ErrUnauthorized) {
			t.Fatalf("call %d with the key set down and no keys held: %v, want the error API Gateway answers 500 (not decided), not 401", i, err)
		}
	}
	if n := h.asked.Load(); n != 1 {
		t.Fatalf("key set asked %d times for three calls in the same second, want once", n)
	}
	h.down.Store(false)
	h.clock = h.clock.Add(6 * time.Second)
	if err := h.call(); err != nil || h.asked.Load() != 2 {
		t.Fatalf("six seconds on, the provider back: %v, key set asked %d times, want it asked again (2)", err, h.asked.Load())
	}
}

// keySetHost serves an issuer's key set through a switch: down answers
// 503, empty a set with no signing key; asked counts the reads. call
// authorizes a bearer of the issuer at the test's clock.
type keySetHost struct {
	down, empty atomic.Bool
	asked       atomic.Int32
	clock       time.Time
	call        func() error
}

func newKeySetHost(t *testing.T) *keySetHost {
	t.Helper()
	is := newIssuer(t)
	h := &keySetHost{clock: now}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.asked.Add(1)
		switch {
		case h.down.Load():
			http.Error(w, "down", http.StatusServiceUnavailable)
		case h.empty.Load():
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"keys":[{"kty":"RSA","use":"enc","kid":"x","n":"AQAB","e":"AQAB"}]}`))
		default:
			is.srv.Config.Handler.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	a, err := New(Config{JWKSURL: srv.URL, Issuer: "https://idp.example", Audience: "funduq", KeyClaim: "funduq_key",
		Leeway: time.Minute}, Options{Client: srv.Client(), Now: func() time.Time { return h.clock }})
	if err != nil {
		t.Fatal(err)
	}
	h.call = func() error {
		_, err := a.Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " +
			is.token(t, "EdDSA", "ed", claims(map[string]any{"exp": h.clock.Add(time.Hour).Unix(), "iat": h.clock.Unix()}))}))
		return err
	}
	return h
}
