package node_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/internal/syncbuf"
	"github.com/funduq/funduq-go/internal/testservers"
	"github.com/funduq/funduq-go/provider"
)

// Between leaders an ALB fails open and sends tickets to standbys
// (infra/broker.yaml): exactly when a standby's view of the published key
// is oldest. A standby that read the old leader's key must not go on
// naming it once a node on another key has taken over and published its
// own: the provider pins the key a ticket names and the new leader, which
// signs with another, is refused. Here c (key A) leads and hands over to b
// (key B); c, now a standby, reads the leader row while b's takeover waits
// on a lock (the row still names c and A); once b has published B, c's
// next ticket is refused.
func TestStandbyRefusesTicketsRightAfterATakeoverByAnotherKey(t *testing.T) {
	c := nodetest.Start(t, nil)
	b := c.PeerWith("node-b", func(cfg *configBroker) { cfg.IdentityKey = nodetest.SeedHex(0x77) }, nil)
	keyA, keyB := c.Node.FunduqKey(), b.Node.FunduqKey()

	// b's takeover (an UPDATE of the leader row) waits behind this;
	// plain reads of the row do not.
	release := c.Hold(`SELECT 1 FROM broker_leader WHERE id = 1 FOR SHARE`)
	requestHandover(t, c)
	c.Eventually("c steps down and reads the row", func() bool {
		_, body := readyzBody(t, c)
		return body["role"] != "leader" && body["identity_key"] == "ok"
	})
	release()
	b.Eventually("b leads", b.Ready)
	if got := askTicket(t, b.URL, 1); got.status != 201 || got.json["funduqPublicKey"] != keyB {
		t.Fatalf("leader b: POST /tickets %d %s; want 201 naming %s", got.status, got.body, keyB)
	}
	if got := askTicket(t, c.URL, 2); got.status != 503 || got.code() != "identity_key_mismatch" {
		t.Fatalf("standby c (key %s) right after b took over and published %s: POST /tickets %d %s; "+
			"want 503 identity_key_mismatch", keyA, keyB, got.status, got.body)
	}
}

// While a takeover is under way — the lease is the new node's, its UPDATE
// of the leader row waits behind a fenced write in flight, so the row
// still names the old leader and its key — a node that is not the leader
// issued tickets naming the old key, which the new leader, on another
// key, does not answer to. No leader takes links meanwhile, so such a
// node refuses: 503 takeover_in_progress with Retry-After, naming no node
// and no key, counted on /metrics, said on /readyz and logged with the
// row's epoch (design.md §Deployment, "A takeover under way"). Our SDK
// retries that 503 as any other, and once the row is written the ticket
// names the new key and the provider connects.
func TestStandbyDuringATakeoverInProgress(t *testing.T) {
	logs := &syncbuf.Buffer{}
	c := nodetest.StartWith(t, nil, func(o *node.Options) { o.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	b := c.PeerWith("node-b", func(cfg *configBroker) { cfg.IdentityKey = nodetest.SeedHex(0x77) }, nil)
	keyA, keyB := c.Node.FunduqKey(), b.Node.FunduqKey()
	lb := nodetest.Balancer(t, c, b)
	_, before := readyzBody(t, c)
	rowEpoch := before["epoch"]

	// A fenced write in flight: b's takeover (an UPDATE of the leader
	// row) waits behind it once b holds the lease.
	release := c.Hold(`SELECT 1 FROM broker_leader WHERE id = 1 FOR SHARE`)
	defer release()
	rdb := requestHandover(t, c)
	c.Eventually("b holds the lease, its takeover waiting on the row", func() bool {
		h, err := lease.ReadHolder(context.Background(), rdb, node.LeaseKey(c.Prefix))
		return err == nil && h.NodeID == b.Cfg.NodeID && c.LockWaitsOn("broker_leader")()
	})

	refused := func(who string, got ticketAnswer) {
		t.Helper()
		if got.status != http.StatusServiceUnavailable || got.code() != "takeover_in_progress" || got.retry == "" {
			t.Fatalf("%s while b's takeover waits: POST /tickets %d Retry-After %q %s; "+
				"want 503 takeover_in_progress with Retry-After", who, got.status, got.retry, got.body)
		}
		if len(got.json) != 1 || strings.Contains(got.body, keyA) || strings.Contains(got.body, keyB) ||
			strings.Contains(got.body, "node-b") || strings.Contains(got.body, c.Cfg.NodeID) {
			t.Fatalf("%s: the refusal says more than its code and message: %s", who, got.body)
		}
	}
	refused("standby c (the old leader, key A)", askTicket(t, c.URL, 1))
	refused("b (the lease's holder, not leading yet)", askTicket(t, b.URL, 2))
	if code, body := readyzBody(t, c); code != http.StatusServiceUnavailable || body["takeover"] != "under_way" {
		t.Fatalf("c's /readyz while b's takeover waits: %d %v; want 503 with takeover under_way", code, body)
	}
	refusals := func() int {
		m := regexp.MustCompile(`(?m)^funduq_tickets_refused_takeover_total (\d+)$`).FindStringSubmatch(metrics(t, c))
		if m == nil {
			return -1
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if n := refusals(); n != 1 {
		t.Fatalf("c's /metrics: funduq_tickets_refused_takeover_total %d; want 1", n)
	}
	warned := false
	for _, r := range logs.Records() {
		if r["level"] == "WARN" && strings.Contains(r["msg"].(string), "takeover") &&
			r["epoch"] == rowEpoch && r["lease_holder"] == "node-b" && r["row_holder"] == c.Cfg.NodeID {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("c logged no WARN naming the takeover, the row's epoch %v and both holders; logs:\n%s", rowEpoch, logs.String())
	}

	// Our SDK, pinned to the new key, meets the refusal through a load
	// balancer failing open (no node is ready) and retries it.
	signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0x3c))
	client, err := provider.New(provider.Config{
		BaseURL: lb, Signer: signer, FunduqKey: keyB,
		Backoff: provider.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Agents:  []provider.Agent{{Name: "echo", Handler: func(context.Context, *provider.Run) error { return nil }}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sdkDone := make(chan error, 1)
	go func() { sdkDone <- client.Run(ctx) }()
	defer func() { cancel(); <-sdkDone }()
	c.Eventually("the SDK is refused by c too", func() bool {
		return refusals() > 1
	})

	release()
	b.Eventually("b leads", b.Ready)
	if got := askTicket(t, lb, 3); got.status != http.StatusCreated || got.json["funduqPublicKey"] != keyB {
		t.Fatalf("through the load balancer once b leads: POST /tickets %d %s; want 201 naming %s", got.status, got.body, keyB)
	}
	select {
	case <-client.Ready():
	case err := <-sdkDone:
		t.Fatalf("the SDK stopped: %v", err)
	}
	if code, body := readyzBody(t, c); body["takeover"] != "none" || body["identity_key"] != "mismatch" {
		t.Fatalf("c's /readyz once b leads: %d %v; want takeover none, identity_key mismatch", code, body)
	}
}

// A standby that cannot reach Redis cannot tell whether a takeover is
// under way (the lease is in Redis), nor issue a ticket (tickets are in
// Redis too). It must answer, not hang, and say only what it knows: 503
// storage_unavailable with Retry-After, no ticket and no claim of a
// takeover; its /readyz says Redis is unreachable and the takeover
// unknown. Refused: the connections are dropped (a Redis down). Hung:
// they are accepted and never answered, with read_timeout=0.
func TestStandbyTicketsWithoutRedis(t *testing.T) {
	honest := func(t *testing.T, who string, got ticketAnswer) {
		t.Helper()
		if got.status != http.StatusServiceUnavailable || got.code() != "storage_unavailable" || got.retry == "" || len(got.json) != 1 {
			t.Fatalf("%s without Redis: POST /tickets %d Retry-After %q %s; want 503 storage_unavailable with Retry-After",
				who, got.status, got.retry, got.body)
		}
	}
	t.Run("refused", func(t *testing.T) {
		a := nodetest.Start(t, nil)
		u, err := url.Parse(a.Cfg.RedisURL)
		if err != nil {
			t.Fatal(err)
		}
		px := newCutProxy(t, u.Host)
		c := a.PeerWith("node-c", func(cfg *configBroker) {
			ru := *u
			ru.Host = px.ln.Addr().String()
			cfg.RedisURL = ru.String()
		}, nil)
		if code, body := readyzBody(t, c); body["takeover"] != "none" || body["identity_key"] != "ok" {
			t.Fatalf("c's /readyz %d %v; want takeover none, identity_key ok", code, body)
		}
		px.cut()
		honest(t, "standby c", ticketFrom(t, c.Node, 1))
		if code, body := readyzBody(t, c); body["redis"] != "unreachable" || body["takeover"] != "unknown" {
			t.Fatalf("c's /readyz without Redis: %d %v; want redis unreachable, takeover unknown", code, body)
		}
	})
	t.Run("hung", func(t *testing.T) {
		n := standby(t, storetest.URL(t), "redis://"+testservers.Stuck(t)+"/0?read_timeout=0")
		honest(t, "a standby", ticketFrom(t, n, 2))
	})
}

// ticketFrom is askTicket through n's handler, within a hang guard.
func ticketFrom(t *testing.T, n *node.Node, seed byte) ticketAnswer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/tickets",
			strings.NewReader(`{"publicKey":"`+s.PublicKeyHex()+`"}`)))
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("POST /tickets did not answer")
	}
	a := ticketAnswer{status: rec.Code, retry: rec.Header().Get("Retry-After"), body: rec.Body.String()}
	_ = json.Unmarshal(rec.Body.Bytes(), &a.json)
	return a
}
