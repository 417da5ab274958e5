package node_test

import (
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Chaos seed 1133 (scripts/chaos --seed 1133 --runs 24): runs queued
// behind a provider's capacity within provider_grace of a takeover, whose
// provider's link was lost without a close frame a moment before the grace
// ended, failed agent_offline as the grace ended — although the link grace
// (D5) still expected the key back, and it was back a moment later. The
// grace's end fails a run still waiting for a provider that did not come
// back; a key within its link grace is still coming back, so its runs wait
// out the link grace as a run arriving then would (design.md §Timers).
func TestQueuedRunWaitsOutALinkGraceThatOutlastsProviderGrace(t *testing.T) {
	h, p, held, heldThread, waits, waitsThread := queuedAtGraceEnd(t)

	// The key comes back within its link grace: both runs complete.
	p2 := h.Connect(0xe7, nodetest.Limit(1))
	p2.Register("echo")
	p2.Complete(held, heldThread)
	h.WaitStatus(held, run.Completed)
	p2.Offer()
	p2.Accept(waits)
	p2.Complete(waits, waitsThread)
	h.WaitStatus(waits, run.Completed)
	if q := h.Quality(p.Key); q.Misdeclared+q.Unanswered+q.AnsweredLate+q.Abandoned+q.Undelivered > 0 {
		t.Fatalf("the provider that came back within its link grace was counted: %+v", q)
	}
}

// A key that is not back when its link grace ends: the run queued for it
// fails agent_offline then, as it would have at the grace's end.
func TestQueuedRunFailsWhenALinkGraceOutlastingProviderGraceEnds(t *testing.T) {
	h, _, _, _, waits, _ := queuedAtGraceEnd(t)
	h.Advance(3 * time.Second) // the link grace ends at +13 s
	if r := h.WaitStatus(waits, run.Failed); r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q once the link grace passed, want agent_offline", r.FailureReason)
	}
}

// queuedAtGraceEnd leaves a run (waits) queued behind the only place of
// its provider's key (held by held) when provider_grace (10 s) ends, the
// key's link lost without a close frame 2 s before (link grace 5 s), and
// asserts it is still queued once the grace's end was decided.
func queuedAtGraceEnd(t *testing.T) (h *nodetest.Harness, p *nodetest.Prov, held, heldThread, waits, waitsThread string) {
	t.Helper()
	h = nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 10 * time.Second; c.LinkGrace = 5 * time.Second })
	p = h.Connect(0xe7, nodetest.Limit(1))
	p.Register("echo")
	held, heldThread = h.Door(p.Key, "echo", "", "holds the only place")
	p.Offer()
	p.Accept(held)
	h.WaitStatus(held, run.Running)
	waits, waitsThread = h.Door(p.Key, "echo", "", "queued behind it")
	takenOrEnded(h, waits)

	// The barrier: an agent whose provider said goodbye within the grace
	// has a run that waits for it until the grace ends, and fails
	// agent_offline then — in the same sweep that decides on waits.
	q := h.Connect(0xe8, nil)
	q.Register("other")
	q.Goodbye()
	h.Eventually("the goodbye's link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	gone, _ := h.Door(q.Key, "other", "", "its provider left for good")
	takenOrEnded(h, gone)

	h.Advance(8 * time.Second)
	p.Close() // a network failure: no close frame; expected back until +13 s
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	h.Advance(2 * time.Second) // provider_grace ends at +10 s
	if r := h.WaitStatus(gone, run.Failed); r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("the goodbye's run failed %q at the grace's end, want agent_offline", r.FailureReason)
	}
	h.Settle()
	if r := h.Run(waits); r.Status != run.Queued {
		t.Fatalf("a run queued for a key within its link grace is %s/%s when provider_grace ends, want queued", r.Status, r.FailureReason)
	}
	return h, p, held, heldThread, waits, waitsThread
}
