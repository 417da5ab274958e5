package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Issue #21, deliverable 9 (chaos seeds 10, 25, 36): a run held by a link
// lost without a close frame keeps its place in the key's bucket through
// the link grace. The provider still runs it, so a re-attached link of the
// key that declared one place is full: offering it another run would make
// it decline, and a decline with room counts misdeclared. The place comes
// back when the run ends after its re-adoption.
func TestLostLinkKeepsItsRunsPlace(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe3, nodetest.Limit(1))
	p.Register("echo")
	held, heldThread := h.Door(p.Key, "echo", "", "held")
	p.Offer()
	p.Accept(held)
	p.Event(held, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, heldThread, held))
	h.Eventually("first event stored", func() bool { return len(h.Events(held)) == 1 })

	p.Close() // a network failure: no close frame
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	if got := h.Node.Broker.Snapshot().InFlight[p.Key]; got != 1 {
		t.Fatalf("in flight %d inside the link grace, want 1 (the held run's place)", got)
	}
	p2 := h.Connect(0xe3, nodetest.Limit(1))
	p2.Register("echo")
	next, nextThread := h.Door(p.Key, "echo", "", "next")
	h.Taken(next)
	p2.None() // full: the held run still has the place, nothing is offered

	p2.Event(held, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p2.Event(held, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, heldThread, held))
	p2.Finish(held)
	h.WaitStatus(held, run.Completed)
	if got := p2.Offer().RunID; got != next {
		t.Fatalf("offered %s, want %s", got, next)
	}
	p2.Accept(next)
	p2.Complete(next, nextThread)
	h.WaitStatus(next, run.Completed)
	h.Settle()
	if q := h.Quality(p.Key); q.Misdeclared+q.Abandoned+q.Unanswered+q.AnsweredLate != 0 {
		t.Fatalf("counted %+v", q)
	}
	if got := h.Node.Broker.Snapshot().InFlight[p.Key]; got != 0 {
		t.Fatalf("in flight %d, want 0", got)
	}
}

// The held run's place is given back when the link grace passes and the
// run fails provider_left_holding_it: the re-attached link is offered the
// next run then.
func TestLostLinksPlaceComesBackAfterTheGrace(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe4, nodetest.Limit(1))
	p.Register("echo")
	held, _ := h.Door(p.Key, "echo", "", "held")
	p.Offer()
	p.Accept(held)
	h.WaitStatus(held, run.Running)
	p.Close()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	p2 := h.Connect(0xe4, nodetest.Limit(1))
	p2.Register("echo")
	next, _ := h.Door(p.Key, "echo", "", "next")
	h.Taken(next)
	p2.None()
	h.Advance(5 * time.Second)
	r := h.WaitStatus(held, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	if got := p2.Offer().RunID; got != next {
		t.Fatalf("offered %s, want %s", got, next)
	}
}

// Chaos seed 17: a run that arrives while its agent's only link was lost
// without a close frame waits for the key to re-attach within the link
// grace, as one does for a provider expected back after a takeover (D5),
// instead of failing agent_offline while the provider is moments away.
// When the grace passes with nobody back it fails agent_offline — not the
// unserved window's no_provider_took_it.
func TestRunWaitsForALostLinkWithinItsGrace(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe5, nodetest.Limit(1))
	p.Register("echo")
	p.Close()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	waits, thread := h.Door(p.Key, "echo", "", "my provider is a moment away")
	takenOrEnded(h, waits)
	if got := h.Run(waits).Status; got != run.Queued {
		t.Fatalf("a run for a lost link's agent is %s inside the link grace", got)
	}
	p2 := h.Connect(0xe5, nodetest.Limit(1))
	p2.Register("echo")
	p2.Offer()
	p2.Accept(waits)
	p2.Complete(waits, thread)
	h.WaitStatus(waits, run.Completed)

	// Lost again, and this time nobody comes back.
	p2.Close()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	alone, _ := h.Door(p.Key, "echo", "", "nobody comes")
	takenOrEnded(h, alone)
	if got := h.Run(alone).Status; got != run.Queued {
		t.Fatalf("a run for a lost link's agent is %s inside the link grace", got)
	}
	h.Advance(5 * time.Second)
	r := h.WaitStatus(alone, run.Failed)
	if r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q after the link grace, want agent_offline", r.FailureReason)
	}
	// A goodbye is certain: a run arriving after it fails at once.
	p3 := h.Connect(0xe5, nodetest.Limit(1))
	p3.Register("echo")
	p3.Goodbye()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	bye, _ := h.Door(p.Key, "echo", "", "after a goodbye")
	r = h.WaitStatus(bye, run.Failed)
	if r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q after a goodbye, want agent_offline", r.FailureReason)
	}
}

// takenOrEnded waits until the broker has taken run id into a lane or the
// run has ended, and the broker has settled.
func takenOrEnded(h *nodetest.Harness, id string) {
	h.Eventually("run "+id+" taken into a lane or ended", func() bool {
		_, ok := h.Node.Broker.Snapshot().Lanes[id]
		return ok || h.Run(id).Status.Terminal()
	})
	h.Settle()
}

// Chaos seed 3: a provider whose link was lost without a close frame just
// before the leader went away is expected back by the next leader too (the
// lost link's grace is recorded with the agent), so a run for its agent
// waits for it — at most until provider_grace ends — instead of failing
// agent_offline at the takeover while the provider is reconnecting.
func TestLostLinksAgentIsExpectedBackAfterATakeover(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second; c.LinkGrace = 5 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xeb, nil)
	p.Register("echo")
	p.Close() // lost: no close frame
	a.Eventually("echo is unserved in the record", func() bool {
		as, err := a.Store.ListAgents(t.Context())
		return err == nil && len(as) == 1 && !as[0].Online
	})
	a.Shutdown()
	b.Eventually("b leads", b.Ready)

	id, thread := b.Door(p.Key, "echo", "", "my provider is reconnecting")
	takenOrEnded(b, id)
	if got := b.Run(id).Status; got != run.Queued {
		t.Fatalf("a run for a lost link's agent is %s after the takeover, inside the grace", got)
	}
	p2 := b.Connect(0xeb, nil)
	p2.Register("echo")
	p2.Offer()
	p2.Accept(id)
	p2.Complete(id, thread)
	b.WaitStatus(id, run.Completed)
}
