package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Issue #21, sixth bullet and deliverable 8: a link lost without a close
// frame holds its runs for the link grace. The same key re-attaching and
// reporting carries on (completed, nothing counted); a run its key, back
// (re-registered at the drop's moment), never reports for fails
// provider_left_holding_it once the grace from the re-attach passes (D5)
// and only then counts abandoned; a provider that says goodbye (a close
// frame) fails its held run at once, as before.
func TestLinkGraceHoldsRunsOfALostLink(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe1, nodetest.Limit(2))
	p.Register("echo")
	kept, keptThread := h.Door(p.Key, "echo", "", "kept")
	p.Offer()
	p.Accept(kept)
	p.Event(kept, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, keptThread, kept))
	lost, _ := h.Door(p.Key, "echo", "", "lost")
	p.Offer()
	p.Accept(lost)
	h.WaitStatus(lost, run.Running)
	h.Eventually("first event stored", func() bool { return len(h.Events(kept)) == 1 })

	p.Close() // a network failure: no close frame
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	if got := h.Run(kept).Status; got != run.Running {
		t.Fatalf("a run of a lost link is %s inside the link grace", got)
	}
	p2 := h.Connect(0xe1, nodetest.Limit(2))
	p2.Register("echo")
	p2.Event(kept, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p2.Event(kept, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"still here"}`)
	p2.Event(kept, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p2.Event(kept, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, keptThread, kept))
	p2.Finish(kept)
	h.WaitStatus(kept, run.Completed)
	if evs := h.Events(kept); len(evs) != 5 {
		t.Fatalf("kept run has %d events, want 5", len(evs))
	}
	if q := h.Quality(p.Key); q.Abandoned != 0 {
		t.Fatalf("a lost link counted abandoned inside the grace: %+v", q)
	}
	h.Advance(5 * time.Second)
	r := h.WaitStatus(lost, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	h.Eventually("abandoned counted once the grace passed", func() bool { return h.Quality(p.Key).Abandoned == 1 })

	// A goodbye is certain: the held run fails at once.
	bye, _ := h.Door(p.Key, "echo", "", "bye")
	p2.Offer()
	p2.Accept(bye)
	h.WaitStatus(bye, run.Running)
	p2.Goodbye()
	r = h.WaitStatus(bye, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	h.Eventually("abandoned counted at the goodbye", func() bool { return h.Quality(p.Key).Abandoned == 2 })
	h.Settle()
	if got := h.Node.Broker.Snapshot().InFlight[p.Key]; got != 0 {
		t.Fatalf("in flight %d, want 0", got)
	}
}
