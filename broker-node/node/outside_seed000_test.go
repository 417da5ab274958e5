package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Seed 002: "Each run contributes at most one count [of abandoned and
// undelivered], whichever funduq observed first." A run counted
// undelivered by one leader and then abandoned under the next (its
// provider re-adopted it after the takeover, then said goodbye holding
// it) is one run, so one count.
func TestUndeliveredThenAbandonedAcrossATakeoverCountsOnce(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := a.Door(p.Key, "echo", "", "slow")
	p.Offer()
	p.Accept(id)
	a.WaitStatus(id, run.Running)
	a.Settle()
	a.Advance(1801 * time.Second)
	a.Eventually("undelivered counted", func() bool { return a.Quality(p.Key).Undelivered == 1 })

	a.Shutdown() // the leader hands over
	b.Eventually("the standby leads", b.Ready)
	b.Taken(id)
	p2 := b.Connect(0xe1, nil)
	p2.Register("echo")
	p2.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)) // re-adopts it
	b.Eventually("the event is stored", func() bool { return len(b.Events(id)) == 1 })
	p2.Goodbye() // leaves holding it: abandoned, were it not counted already
	r := b.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("failed %q, want provider_left_holding_it", r.FailureReason)
	}
	b.Settle()
	b.Shutdown() // every lane done: a count it makes is made
	var abandoned, undelivered int64
	if err := b.DB().QueryRow(context.Background(), `SELECT abandoned, undelivered FROM provider_quality WHERE provider_key = $1`,
		p.Key).Scan(&abandoned, &undelivered); err != nil {
		t.Fatal(err)
	}
	if abandoned+undelivered != 1 {
		t.Fatalf("counted abandoned %d, undelivered %d for one run; want one count", abandoned, undelivered)
	}
}

// D15: a report from the key serving the agent, for a run with an offer
// out to that key, claims it. A provider with two processes (links) of
// one key — each serving its own agent — whose other process answers the
// offer within the delivery window answered in time: nothing is counted,
// and the run is the answering link's.
func TestOfferAnsweredByAnotherLinkOfTheKey(t *testing.T) {
	for _, how := range []string{"ack", "event"} {
		t.Run(how, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			a := h.Connect(0xe1, nil)
			a.Register("echo")
			b := h.Connect(0xe1, nil)
			b.Register("other") // a still serves echo: not replaced
			id, thread := h.Door(a.Key, "echo", "", "hi")
			if f := a.Offer(); f.RunID != id {
				t.Fatalf("offer %s", f.RunID)
			}
			switch how {
			case "ack":
				b.Accept(id)
			case "event":
				b.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
			}
			b.ReadBarrier() // the broker has read b's answer
			h.Settle()
			h.Advance(5 * time.Second) // the delivery window passes
			for _, f := range b.Barrier() {
				t.Logf("b was sent: %s", f)
			}
			b.Complete(id, thread)
			h.WaitStatus(id, run.Completed)
			h.Settle()
			if q := h.Quality(a.Key); q.Unanswered != 0 || q.AnsweredLate != 0 || q.Misdeclared != 0 {
				t.Fatalf("answered in time by its key, yet counted: %+v", q)
			}
		})
	}
}
