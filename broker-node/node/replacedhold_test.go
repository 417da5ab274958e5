package node_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// A provider reconnecting while its old link still looks open registers
// on the new link, which replaces the old one (left open, offered
// nothing), until the old one is found dead. The provider did not stop
// serving — it is on the new link — so what the old link held passes to
// the new one, with no link grace as with one (FUNDUQ_LINK_GRACE=0 here):
// the new link's report carries the run on to its end and nothing counts.
// On main the run failed provider_left_holding_it and counted abandoned as
// the old link closed.
func TestReplacedLinksRunWithoutALinkGrace(t *testing.T) {
	h := nodetest.Start(t, nil) // LinkGrace 0
	p1 := h.Connect(0xe1, nil)
	p1.Register("echo")
	id, thread := h.Door(p1.Key, "echo", "", "hi")
	p1.Offer()
	p1.Accept(id)
	h.WaitStatus(id, run.Running)
	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	p1.Close() // the old link found dead at last
	h.Eventually("one link left", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	h.Settle()
	p2.Complete(id, thread)
	var r store.Run
	h.Eventually("the run ends", func() bool { r = h.Run(id); return r.Status.Terminal() })
	h.Settle()
	if q := h.Quality(p1.Key); r.Status != run.Completed || q.Abandoned != 0 {
		t.Fatalf("run %s (%s), counted %+v", r.Status, r.FailureReason, q)
	}
	if got := h.Node.Broker.Snapshot().InFlight[p1.Key]; got != 0 {
		t.Fatalf("in flight %d after the run ended, want 0", got)
	}
}
