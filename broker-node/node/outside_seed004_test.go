package node_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Seed 004 ("Runs and cancels are requests") against a raw provider, the
// broker's side; the doors' side is functions/a2a's and functions/agui's
// outside_seed004_test.go.

// "Its place on the provider is spent. A provider that declared room for
// one gets one offer, not one accepted run plus however many offers were
// in flight while it was thinking." A provider slow to answer is offered
// nothing more while it thinks, nor once it has taken the run; the next
// conversation's run is offered when the first ends.
func TestOutsideSeed004RoomForOneIsOneOffer(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	a, at := h.Door(p.Key, "echo", "", "a")
	if f := p.Offer(); f.RunID != a {
		t.Fatalf("offer %s, want %s", f.RunID, a)
	}
	b, bt := h.Door(p.Key, "echo", "", "b") // another conversation
	h.Taken(b)
	p.None() // thinking: no second offer
	p.Accept(a)
	h.WaitStatus(a, run.Running)
	p.None() // holding it: none either
	p.Complete(a, at)
	h.WaitStatus(a, run.Completed)
	if f := p.Offer(); f.RunID != b {
		t.Fatalf("offer %s, want %s", f.RunID, b)
	}
	p.Accept(b)
	p.Complete(b, bt)
	h.WaitStatus(b, run.Completed)
}

// "declined — 'full right now'; funduq keeps the run queued and offers
// again when something changes". The change here is one of the
// provider's own runs ending: a provider with room for two, holding one,
// declines the second (counted, its declaration stands), is offered
// nothing while nothing changes, and is offered it again when its first
// run ends.
func TestOutsideSeed004DeclinedRunOfferedAgainWhenTheProvidersRunEnds(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(2))
	p.Register("echo")
	a, at := h.Door(p.Key, "echo", "", "a")
	p.Offer()
	p.Accept(a)
	h.WaitStatus(a, run.Running)
	b, bt := h.Door(p.Key, "echo", "", "b")
	if f := p.Offer(); f.RunID != b {
		t.Fatalf("offer %s, want %s", f.RunID, b)
	}
	p.Decline(b)
	h.WaitStatus(b, run.Queued)
	p.None()
	p.Complete(a, at)
	h.WaitStatus(a, run.Completed)
	if f := p.Offer(); f.RunID != b {
		t.Fatalf("offer %s, want %s", f.RunID, b)
	}
	p.Accept(b)
	p.Complete(b, bt)
	h.WaitStatus(b, run.Completed)
	h.Settle()
	if q := h.Quality(p.Key); q.Misdeclared != 1 || charges(q) != 1 {
		t.Fatalf("quality %+v, want the one decline with room counted", q)
	}
}
