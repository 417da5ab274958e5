package node_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Seed 001, "Quality counters are per-process and in memory", names the
// trap of a restart that resets the counts ("it breaks again a few days
// later"); D6 removes it: the counters are persisted, so a restart or
// failover does not reset them. Counts a key earned under one leader and
// the next add up to the tolerance: one decline with room under node a,
// one under node b after a takeover, tolerance 2 — the key is withdrawn
// by node b, and the record says 2.
func TestOutsideSeed001CountsFromTwoLeadersWithdraw(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderQualityTolerance = 2 })
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nil)
	p.Register("echo")
	id, _ := a.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Decline(id)
	a.Eventually("misdeclared counted", func() bool { return a.Quality(p.Key).Misdeclared == 1 })
	a.Shutdown()
	b.Eventually("the standby leads", b.Ready)
	if q := b.Quality(p.Key); q.Misdeclared != 1 || q.WithdrawnAt != nil {
		t.Fatalf("after the takeover the record reads %+v", q)
	}
	back := b.Connect(0xe1, nil)
	back.Register("echo")
	if f := back.Offer(); f.RunID != id {
		t.Fatalf("offered %s, want %s", f.RunID, id)
	}
	back.Decline(id)
	b.Eventually("withdrawn by the next leader", func() bool { return b.Quality(p.Key).WithdrawnAt != nil })
	expectWithdrawalNotice(t, back)
	if q := b.Quality(p.Key); q.Misdeclared != 2 {
		t.Fatalf("quality %+v, want 2 misdeclared", q)
	}
	if st := b.Run(id).Status; st != run.Queued {
		t.Fatalf("the declined run is %s; withdrawn, it takes the no-provider road", st)
	}
}
