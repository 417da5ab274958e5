package node_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// The leader publishes funduq's public identity key as it takes the epoch,
// for the doors to compare theirs with (design.md §Deployment, "One
// identity key"). A node with the same key takes over in silence; one with
// another key publishes its own — it is the node providers now meet — and
// logs an error naming both public keys, and no seed.
func TestLeaderPublishesItsIdentityKey(t *testing.T) {
	a := nodetest.Start(t, nil)
	published := func(h *nodetest.Harness) string {
		t.Helper()
		l, err := h.Store.CurrentLeader(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return l.FunduqKey
	}
	if got := published(a); got != a.Node.FunduqKey() {
		t.Fatalf("published key %q, want the leader's %s", got, a.Node.FunduqKey())
	}

	logsB, logsC := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	logTo := func(b *syncbuf.Buffer) func(*node.Options) {
		return func(o *node.Options) { o.Logger = slog.New(slog.NewJSONHandler(b, nil)) }
	}
	b := a.PeerWith("node-b", nil, logTo(logsB))
	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	if got := published(b); got != a.Node.FunduqKey() {
		t.Fatalf("published key %q after a takeover with the same key, want %s", got, a.Node.FunduqKey())
	}
	for _, r := range logsB.Records() {
		if r["level"] == "ERROR" {
			t.Fatalf("a takeover with the same key logged an error: %v", r)
		}
	}

	other := nodetest.SeedHex(0x77)
	c := b.PeerWith("node-c", func(c *configBroker) { c.IdentityKey = other }, logTo(logsC))
	b.Shutdown()
	c.Eventually("c leads", c.Ready)
	if c.Node.FunduqKey() == a.Node.FunduqKey() {
		t.Fatal("the test needs two keys")
	}
	if got := published(c); got != c.Node.FunduqKey() {
		t.Fatalf("published key %q after a takeover with another key, want the new leader's %s", got, c.Node.FunduqKey())
	}
	var loud map[string]any
	for _, r := range logsC.Records() {
		if r["level"] == "ERROR" && strings.Contains(r["msg"].(string), "FUNDUQ_IDENTITY_KEY") {
			loud = r
		}
	}
	if loud == nil {
		t.Fatalf("no error says the keys differ; logs:\n%s", logsC.String())
	}
	if loud["funduq_key"] != c.Node.FunduqKey() || loud["previous_funduq_key"] != a.Node.FunduqKey() {
		t.Fatalf("the error names %v and %v, want %s (this node's) and %s (the previous)", loud["funduq_key"],
			loud["previous_funduq_key"], c.Node.FunduqKey(), a.Node.FunduqKey())
	}
	if strings.Contains(logsC.String(), other) || strings.Contains(logsB.String(), nodetest.SeedHex(0xb6)) {
		t.Fatal("a seed was logged")
	}
}
