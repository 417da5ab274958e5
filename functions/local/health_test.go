package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/testservers"
)

// /health probes each store under a deadline of its own: the store that
// hangs is named unreachable, and the one that answers is not blamed for
// the time the hung one took.
func TestHealthNamesOnlyTheHungStore(t *testing.T) {
	for _, tc := range []struct {
		name              string
		dbURL, redisURL   func(t *testing.T) string
		wantDB, wantRedis string
	}{
		{"redis", func(t *testing.T) string { return storetest.URL(t) }, func(t *testing.T) string { return "redis://" + testservers.Stuck(t) + "/0" }, "ok", "unreachable"},
		{"database", func(t *testing.T) string {
			return "postgres://postgres@" + testservers.Stuck(t) + "/funduq?sslmode=disable"
		},
			func(*testing.T) string { return redistest.URL() }, "unreachable", "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, prefix := redistest.Client(t)
			deps, err := door.Connect(config.Door{
				Storage:  config.Storage{DatabaseURL: tc.dbURL(t), RedisURL: tc.redisURL(t)},
				Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
			}, door.ConnectOptions{RedisPrefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(deps.Close)
			rec := httptest.NewRecorder()
			done := make(chan struct{})
			go func() {
				defer close(done)
				health(deps).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
				t.Fatal("/health did not answer")
			}
			var body map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("/health %d %q: %v", rec.Code, rec.Body.String(), err)
			}
			if rec.Code != http.StatusServiceUnavailable || body["database"] != tc.wantDB || body["redis"] != tc.wantRedis {
				t.Fatalf("/health %d %v; want 503 with database %s and redis %s", rec.Code, body, tc.wantDB, tc.wantRedis)
			}
		})
	}
}
