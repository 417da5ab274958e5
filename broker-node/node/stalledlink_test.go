package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// lockFence makes every fenced write of h's broker wait (the fence reads
// broker_leader FOR SHARE) until release is called; unfenced reads and the
// doors' writes go on.
func lockFence(t *testing.T, h *nodetest.Harness) (release func()) {
	t.Helper()
	return h.Hold(`SELECT epoch FROM broker_leader WHERE id = 1 FOR UPDATE`)
}

// An offer made to a link funduq has stopped reading (its event backlog is
// full while the store is slow: backpressure) is answered in time by the
// provider, but the answer sits unread in the socket. The offer's lapse is
// funduq's stall, not the provider's silence: nothing counts unanswered or
// answered_late, and the accept, once read, claims the run (design.md D6:
// the counters are what funduq observes of the provider).
func TestOfferToAStalledLinkIsNotUnanswered(t *testing.T) {
	h, p, r, rThread, release := stalledLink(t)
	defer func() {
		if release != nil {
			release()
		}
	}()
	s, sThread := h.Door(p.Key, "echo", "", "offered to a stalled link")
	if f := p.Offer(); f.RunID != s {
		t.Fatalf("offer %s, want %s", f.RunID, s)
	}
	p.Accept(s)                      // in time; funduq is not reading
	h.Clock.Advance(5 * time.Second) // deliver_timeout
	release()
	release = nil
	var sr store.Run
	h.Eventually("the offered run is claimed", func() bool { sr = h.Run(s); return sr.Status != run.Queued && sr.Status != run.Offering })
	if sr.Status != run.Running {
		t.Fatalf("offered run is %s", sr.Status)
	}
	p.Complete(s, sThread)
	h.WaitStatus(s, run.Completed)
	p.Complete(r, rThread)
	h.WaitStatus(r, run.Completed)
	h.Settle()
	nothingCounted(t, h, p.Key, "funduq's own stall, blamed on the provider")
}

// The other side of the same rule: an offer sent while funduq was not
// reading the link, which the provider never answers, still lapses once
// the link is read again — unanswered counted, the run back in the queue.
func TestUnansweredOfferToAnOnceStalledLinkLapses(t *testing.T) {
	h, p, r, _, release := stalledLink(t)
	s, _ := h.Door(p.Key, "echo", "", "never answered")
	if f := p.Offer(); f.RunID != s {
		t.Fatalf("offer %s, want %s", f.RunID, s)
	}
	release()
	h.Eventually("the backlog is stored", func() bool { return len(h.Events(r)) == stalledBacklog+2 })
	h.Settle()
	h.Clock.Advance(5 * time.Second) // deliver_timeout, after the link is read again
	h.WaitStatus(s, run.Queued)
	h.Eventually("unanswered counted", func() bool { return h.Quality(p.Key).Unanswered == 1 })
}

// stalledBacklog is the event backlog of stalledLink's links.
const stalledBacklog = 2

// stalledLink starts a node whose provider holds run r and has sent more
// events than its link's backlog holds while the store is fenced off
// (lockFence), so the link's read loop waits: funduq is not reading it.
// release lifts the fence.
func stalledLink(t *testing.T) (h *nodetest.Harness, p *nodetest.Prov, r, rThread string, release func()) {
	t.Helper()
	h = nodetest.Start(t, func(c *configBroker) { c.LinkEventBacklog = stalledBacklog })
	p = h.Connect(0xe1, nil)
	p.Register("echo")
	r, rThread = h.Door(p.Key, "echo", "", "streaming")
	p.Offer()
	p.Accept(r)
	h.WaitStatus(r, run.Running)
	release = lockFence(t, h)
	p.Event(r, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, rThread, r))
	for i := range stalledBacklog + 1 {
		p.Event(r, fmt.Sprintf(`{"type":"CUSTOM","name":"tick","value":%d}`, i))
	}
	h.Eventually("the link's read loop waits on its backlog", func() bool {
		return strings.Contains(metrics(t, h), "funduq_broker_link_backpressure_total 1")
	})
	return h, p, r, rThread, release
}
