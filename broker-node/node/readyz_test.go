package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/internal/testservers"
)

// /readyz probes each store under a deadline of its own: the store that
// hangs is named unreachable, and the one that answers is not blamed for
// the time the hung one took.
func TestReadyzNamesOnlyTheHungStore(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		n := standby(t, storetest.URL(t), "redis://"+testservers.Stuck(t)+"/0")
		if code, body := readyz(t, n); code != http.StatusServiceUnavailable || body["database"] != "ok" || body["redis"] != "unreachable" {
			t.Fatalf("/readyz %d %v; want 503 with database ok and redis unreachable", code, body)
		}
	})
	t.Run("database", func(t *testing.T) {
		pg := testservers.PG(t)
		n := standby(t, testservers.DB(t, pg), redistest.URL())
		if err := pg.Freeze(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Thaw) // before the node closes its pool on it
		if code, body := readyz(t, n); code != http.StatusServiceUnavailable || body["database"] != "unreachable" || body["redis"] != "ok" {
			t.Fatalf("/readyz %d %v; want 503 with database unreachable and redis ok", code, body)
		}
	})
}

// standby is a node on the given stores that is not running: it never
// leads, so /readyz also looks up the leader in both stores.
func standby(t *testing.T, dbURL, redisURL string) *node.Node {
	t.Helper()
	_, prefix := redistest.Client(t)
	cfg := config.Broker{
		Storage:  config.Storage{DatabaseURL: dbURL, RedisURL: redisURL},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
		Waits:    config.Waits{LeaseTTL: 10 * time.Second, DeliverTimeout: 5 * time.Second, UnservedTimeout: 45 * time.Second, UndeliveredWindow: time.Hour},
		NodeID:   "standby", AdvertiseURL: "http://127.0.0.1:1",
	}
	n, err := node.New(context.Background(), cfg, node.Options{RedisPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// readyz asks n's /readyz, within a hang guard.
func readyz(t *testing.T, n *node.Node) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("/readyz did not answer")
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("/readyz %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	return rec.Code, body
}
