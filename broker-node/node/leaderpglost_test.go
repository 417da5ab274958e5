package node_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// proxiedDB starts a cutProxy in front of dbURL's PostgreSQL and returns
// it with dbURL through it: one node's path to the database, cut alone.
func proxiedDB(t *testing.T, dbURL string) (*cutProxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	px := newCutProxy(t, u.Host)
	u.Host = px.ln.Addr().String()
	return px, u.String()
}

// An outside operator's test: leader A reaches PostgreSQL through a proxy,
// standby B directly, both reach Redis. A's path is cut while it has no
// write of its own to make (its provider idle, no run). A run a door then
// stores must still be offered: A, whose heartbeat cannot land for
// FUNDUQ_STORE_RETRY_FOR, steps down as on a write that could not land
// (design.md D13) and releases the lease; B takes over and offers the run.
// Before the fix A kept the lease for as long as Redis answered.
func TestLeaderWithoutPostgreSQLStepsDown(t *testing.T) {
	dbURL := storetest.URL(t)
	_, prefix := redistest.Client(t)
	px, viaProxy := proxiedDB(t, dbURL)
	short := func(c *configBroker) { c.StoreRetryFor = time.Second }
	a := nodetest.StartOn(t, viaProxy, redistest.URL(), prefix, short, nil)
	b := a.PeerWith("node-b", func(c *configBroker) { short(c); c.DatabaseURL = dbURL }, nil)

	onA := a.Connect(0xf1, nil)
	onA.Register("echo")
	onA.Barrier()
	a.Settle() // A's writes have landed: it has none left to make
	px.cut()
	id, _ := b.Door(onA.Key, "echo", "", "hi")
	b.Eventually("B takes the lease over from A, which lost PostgreSQL", b.Ready)
	if leading, _ := a.Node.Broker.Leading(); leading {
		t.Fatal("A still leads beside B")
	}
	onA.Close()
	p := b.Connect(0xf1, nil)
	p.Register("echo")
	if f := p.Offer(); f.RunID != id {
		t.Fatalf("offered %s, want %s", f.RunID, id)
	}
	// A campaigns again once it reaches PostgreSQL: handed the lease by B,
	// it leads.
	px.open()
	requestHandover(t, b)
	a.Eventually("A leads again once it reaches PostgreSQL", a.Ready)
}

// A blip on the leader's path to PostgreSQL, shorter than
// FUNDUQ_STORE_RETRY_FOR (its default, 30 s), is retried through: once a
// beat has failed and the path is back, a retried beat lands and the
// leader still leads under the same epoch, its lease kept.
func TestLeaderOutlastsPostgreSQLBlip(t *testing.T) {
	dbURL := storetest.URL(t)
	_, prefix := redistest.Client(t)
	px, viaProxy := proxiedDB(t, dbURL)
	a := nodetest.StartOn(t, viaProxy, redistest.URL(), prefix, nil, nil)
	_, epoch := a.Node.Broker.Leading()
	const failing = "\nfunduq_leader_heartbeat_failing 1\n"
	px.cut()
	a.Eventually("a heartbeat fails", func() bool { return strings.Contains(metrics(t, a), failing) })
	px.open()
	a.Eventually("a retried heartbeat lands", func() bool {
		return strings.Contains(metrics(t, a), "\nfunduq_leader_heartbeat_failing 0\n")
	})
	if leading, now := a.Node.Broker.Leading(); !leading || now != epoch {
		t.Fatalf("after the blip: leading %v under epoch %d; want still leading under %d", leading, now, epoch)
	}
	if !a.Ready() {
		t.Fatal("after the blip the leader's /readyz is not 200")
	}
}
