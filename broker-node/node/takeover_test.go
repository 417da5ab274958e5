package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// Issue #21, fifth bullet and deliverable 5: around a takeover, a run for
// an agent nobody served when the previous leader went away fails
// agent_offline at once; one whose provider is expected back (it served
// the agent then) waits, at most until provider_grace ends, and then fails
// agent_offline — never the unserved window's no_provider_took_it.
func TestFastFailAroundATakeover(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nil)
	p.Register("echo")
	gone := a.Connect(0xe2, nil)
	gone.Register("gone")
	gone.Goodbye()
	a.Eventually("gone is unserved in the record", func() bool {
		as, err := a.Store.ListAgents(t.Context())
		for _, ag := range as {
			if ag.Name == "gone" {
				return err == nil && !ag.Online
			}
		}
		return false
	})
	a.Shutdown()
	b.Eventually("b leads", b.Ready)

	offline, _ := b.Door(gone.Key, "gone", "", "nobody serves me")
	r := b.WaitStatus(offline, run.Failed)
	if r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	expected, _ := b.Door(p.Key, "echo", "", "my provider is expected back")
	b.Taken(expected)
	if got := b.Run(expected).Status; got != run.Queued {
		t.Fatalf("a run whose provider is expected back is %s inside the grace", got)
	}
	b.Advance(30 * time.Second)
	r = b.WaitStatus(expected, run.Failed)
	if r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q after the grace, want agent_offline", r.FailureReason)
	}
}

// Deliverable 7: a link whose every agent a newer link of the same key took
// over is told so (an error frame), so it does not go on believing it
// serves. It is left open, offered nothing (design.md §Two processes of
// one key): closed, the reference SDK reconnected and took the agent back.
func TestReplacedLinkIsToldAndLeftOpen(t *testing.T) {
	h := nodetest.Start(t, nil)
	p1 := h.Connect(0xe1, nil)
	p1.Register("echo")
	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	var e wire.Error
	p1.Expect(wire.TypeError, &e)
	if !strings.Contains(e.Message, "replaced by a newer link") {
		t.Fatalf("error %q", e.Message)
	}
	// The newer link serves on.
	id, thread := h.Door(p2.Key, "echo", "", "hi")
	p2.Offer()
	p2.Accept(id)
	p2.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	p1.None() // open, its query answered, offered nothing
	if c, err := p1.Closed(); c {
		t.Fatalf("the replaced link was closed: %v", err)
	}
}

// A provider that reconnects while its old link still looks open (a
// half-open connection after a network blip) registers on the new link:
// the old link is replaced (left open, offered nothing), and the runs it
// held carry on over the new link — its reports are taken, not refused as
// another link's.
func TestRunsPassToTheLinkThatReplacedTheirs(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p1 := h.Connect(0xe1, nil)
	p1.Register("echo")
	id, thread := h.Door(p1.Key, "echo", "", "hi")
	p1.Offer()
	p1.Accept(id)
	h.WaitStatus(id, run.Running)
	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	p2.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	if n := len(h.Events(id)); n != 5 {
		t.Fatalf("%d events stored, want 5", n)
	}
	h.Settle()
	if q := h.Quality(p1.Key); q.Abandoned != 0 {
		t.Fatalf("counted %+v", q)
	}
	if got := h.Node.Broker.Snapshot().InFlight[p1.Key]; got != 0 {
		t.Fatalf("in flight %d", got)
	}
}
