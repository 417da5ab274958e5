package node_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/provider"
)

// An operator's walk-through: a provider whose FUNDUQ_BROKER_URL names one
// node, with no load balancer in front (README "Running a broker node"),
// is pointed at a standby whose path to PostgreSQL is cut. With its
// database in reach such a standby issues the ticket and its /ws/provider
// names the leader (TestStandbyPointsAtTheLeader); without it, it cannot
// check the leader's identity key, so it issues none — and before the fix
// its POST /tickets was 503 storage_unavailable naming nobody, so the
// provider retried that one URL for as long as the cut lasted. The lease
// and each node's announcement are in Redis: the standby names the leader
// from them, 503 not_leader with "leader" as its /ws/provider answers, and
// our SDK given the standby's URL serves at the leader.
func TestStandbyWithoutPostgreSQLNamesTheLeader(t *testing.T) {
	dbURL := storetest.URL(t)
	rdb, prefix := redistest.Client(t)
	a := nodetest.StartOn(t, dbURL, redistest.URL(), prefix, nil, nil)
	px, viaProxy := proxiedDB(t, dbURL)
	b := a.PeerWith("node-b", func(c *configBroker) { c.DatabaseURL = viaProxy }, nil)
	a.Eventually("a is announced as leading", func() bool {
		v, err := rdb.HGet(context.Background(), node.NodesKey(prefix), a.Cfg.NodeID).Result()
		return err == nil && strings.Contains(v, `"role":"leader"`)
	})
	px.cut()

	got := askTicket(t, b.URL, 0xd1)
	if got.status != http.StatusServiceUnavailable || got.code() != "not_leader" || got.json["leader"] != a.Cfg.AdvertiseURL ||
		got.retry == "" {
		t.Fatalf("POST /tickets on a standby without PostgreSQL: %d Retry-After %q %s; want 503 not_leader naming the leader %s",
			got.status, got.retry, got.body, a.Cfg.AdvertiseURL)
	}
	_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(b.URL, "http")+"/ws/provider", nil)
	if err == nil || resp == nil {
		t.Fatalf("upgrade on a standby without PostgreSQL: %v", err)
	}
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if e, _ := body["error"].(map[string]any); resp.StatusCode != http.StatusServiceUnavailable || e["code"] != "not_leader" ||
		body["leader"] != a.Cfg.AdvertiseURL {
		t.Fatalf("upgrade on a standby without PostgreSQL: %d %v; want 503 not_leader naming the leader %s",
			resp.StatusCode, body, a.Cfg.AdvertiseURL)
	}

	// Its /readyz (an operator's look at which node leads) names the
	// leader too, and says the database is what it cannot reach.
	rresp, err := http.Get(b.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready map[string]any
	_ = json.NewDecoder(rresp.Body).Decode(&ready)
	rresp.Body.Close()
	if rresp.StatusCode != http.StatusServiceUnavailable || ready["role"] != "standby" || ready["database"] != "unreachable" ||
		ready["leader"] != a.Cfg.AdvertiseURL {
		t.Fatalf("/readyz on a standby without PostgreSQL: %d %v; want 503, database unreachable, naming the leader %s",
			rresp.StatusCode, ready, a.Cfg.AdvertiseURL)
	}

	signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xd2))
	client, err := provider.New(provider.Config{
		BaseURL: b.URL, Signer: signer, FunduqKey: a.Node.FunduqKey(),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backoff: provider.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Agents: []provider.Agent{{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
			if err := sdkStart(ctx, r); err != nil {
				return err
			}
			return sdkReply(ctx, r, "hi")
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runSDK(client)()
	id, _ := a.Door(signer.PublicKeyHex(), "echo", "", "hello")
	a.WaitStatus(id, run.Completed)
}

// A standby that cannot name the leader says why in its refusal: with
// nobody leading there is nobody to name, and "broker store unavailable"
// alone sent an operator after the database only.
func TestStandbyWithoutPostgreSQLSaysWhyItNamesNoLeader(t *testing.T) {
	dbURL := storetest.URL(t)
	_, prefix := redistest.Client(t)
	a := nodetest.StartOn(t, dbURL, redistest.URL(), prefix, nil, nil)
	px, viaProxy := proxiedDB(t, dbURL)
	b := a.PeerWith("node-b", func(c *configBroker) { c.DatabaseURL = viaProxy }, nil)
	px.cut()
	a.Shutdown() // releases the lease; b cannot take an epoch without PostgreSQL

	got := askTicket(t, b.URL, 0xd3)
	e, _ := got.json["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if got.status != http.StatusServiceUnavailable || got.code() != "storage_unavailable" || got.retry == "" ||
		got.json["leader"] != nil || !strings.Contains(msg, "no leader") {
		t.Fatalf("POST /tickets with nobody leading: %d Retry-After %q %s; want 503 storage_unavailable saying no leader is known",
			got.status, got.retry, got.body)
	}
}
