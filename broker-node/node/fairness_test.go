package node_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// An offer goes out on a link the network has just killed: the provider
// never sees it (or its ack dies with the link) and re-attaches on a new
// link — while the old one still looks open (replaced), or after funduq saw
// it drop without a close frame (within the link grace). Nobody answered
// the offer because the network lost it, not because the provider ignored
// it: the run reaches the provider on its new link and nothing is counted
// (design.md D6, §Counters).
func TestOfferLostWithItsLinkCountsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost bool
	}{{"replaced", false}, {"lost", true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
			p1 := h.Connect(0xe1, nodetest.Limit(1))
			p1.Register("echo")
			id, thread := h.Door(p1.Key, "echo", "", "hi")
			if got := p1.Offer().RunID; got != id {
				t.Fatalf("offered %s, want %s", got, id)
			}
			if tc.lost {
				p1.Close() // no close frame
				h.Eventually("the lost link is dropped", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
			}
			p2 := h.Connect(0xe1, nodetest.Limit(1))
			p2.Register("echo")
			h.Eventually("one link left", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
			h.Settle()
			// The run reaches the new link without waiting out the old
			// offer's deliver_timeout (the clock does not move).
			for {
				typ, f := p2.Next()
				if typ != wire.TypeRun {
					continue
				}
				var o wire.RunFrame
				_ = json.Unmarshal(f, &o)
				if o.RunID == id {
					break
				}
			}
			p2.Accept(id)
			p2.Complete(id, thread)
			h.WaitStatus(id, run.Completed)
			h.Settle()
			if q := h.Quality(p1.Key); charges(q) != 0 || q.WithdrawnAt != nil {
				t.Fatalf("the provider lost an offer with its link and was counted %+v", q)
			}
		})
	}
}

// A provider of one place acks an offer, and its link dies with the ack on
// it (no close frame). It re-attaches — within the link grace, or before
// funduq noticed, replacing the dead link — still running
// the run it acked, while a second run of its agent waits. Whichever run
// funduq offers the new link first, the provider answers as its one place
// allows: the run it holds it accepts again (design.md D7: a provider that
// had accepted simply accepts again), anything else it declines until that
// run ends. It declared truly, so nothing counts (D6, §Counters); both runs
// complete.
func TestAckLostWithItsLinkCountsNoDecline(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost bool
	}{{"lost", true}, {"replaced", false}} {
		t.Run(tc.name, func(t *testing.T) { ackLost(t, tc.lost) })
	}
}

func ackLost(t *testing.T, lost bool) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p1 := h.Connect(0xe1, nodetest.Limit(1))
	p1.Register("echo")
	first, firstThread := h.Door(p1.Key, "echo", "", "one")
	if got := p1.Offer().RunID; got != first {
		t.Fatalf("offered %s, want %s", got, first)
	}
	second, secondThread := h.Door(p1.Key, "echo", "", "two")
	h.Taken(second)
	if lost {
		p1.Close() // the ack it was writing died with the link
		h.Eventually("the lost link is dropped", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
		h.Settle()
	} // else: funduq has not noticed yet; the new link replaces it
	p2 := h.Connect(0xe1, nodetest.Limit(1))
	p2.Register("echo")

	threads := map[string]string{first: firstThread, second: secondThread}
	holding := first
	done := map[string]bool{}
	for len(done) < 2 {
		typ, f := p2.Next()
		if typ != wire.TypeRun {
			continue
		}
		var o wire.RunFrame
		_ = json.Unmarshal(f, &o)
		if holding != "" && o.RunID != holding {
			p2.Decline(o.RunID)
			h.Settle()
			if q := h.Quality(p2.Key); charges(q) != 0 {
				t.Fatalf("the provider, holding %s (its ack lost with its link), declined %s and was counted %+v", holding, o.RunID, q)
			}
			continue
		}
		p2.Accept(o.RunID)
		p2.Complete(o.RunID, threads[o.RunID])
		h.WaitStatus(o.RunID, run.Completed)
		done[o.RunID] = true
		holding = ""
	}
	h.Settle()
	if q := h.Quality(p2.Key); charges(q) != 0 || q.WithdrawnAt != nil {
		t.Fatalf("counted %+v", q)
	}
}

// The same provider of one place across a takeover: its ack of an offer
// dies with the old leader, and it re-attaches to the new one still running
// that run (design.md D7: an offering run goes back to queued and "a
// provider that had accepted simply accepts again"). Another run of its
// agent waits meanwhile; the provider declines it while its place is taken,
// and nothing counts.
func TestAckLostWithTheLeaderCountsNoDecline(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p1 := a.Connect(0xe1, nodetest.Limit(1))
	p1.Register("echo")
	first, firstThread := a.Door(p1.Key, "echo", "", "one")
	if got := p1.Offer().RunID; got != first {
		t.Fatalf("offered %s, want %s", got, first)
	}
	a.WaitStatus(first, run.Offering)
	second, secondThread := a.Door(p1.Key, "echo", "", "two")
	a.Taken(second)
	a.Shutdown() // the ack p1 was writing is lost with the leader
	b.Eventually("b leads", b.Ready)
	p2 := b.Connect(0xe1, nodetest.Limit(1))
	p2.Register("echo")

	threads := map[string]string{first: firstThread, second: secondThread}
	holding := first
	done := map[string]bool{}
	for len(done) < 2 {
		typ, f := p2.Next()
		if typ != wire.TypeRun {
			continue
		}
		var o wire.RunFrame
		_ = json.Unmarshal(f, &o)
		if holding != "" && o.RunID != holding {
			p2.Decline(o.RunID)
			b.Settle()
			if q := b.Quality(p2.Key); charges(q) != 0 {
				t.Fatalf("the provider, holding %s (its ack lost with the leader), declined %s and was counted %+v", holding, o.RunID, q)
			}
			continue
		}
		p2.Accept(o.RunID)
		p2.Complete(o.RunID, threads[o.RunID])
		b.WaitStatus(o.RunID, run.Completed)
		done[o.RunID] = true
		holding = ""
	}
	b.Settle()
	if q := b.Quality(p2.Key); charges(q) != 0 || q.WithdrawnAt != nil {
		t.Fatalf("counted %+v", q)
	}
}
