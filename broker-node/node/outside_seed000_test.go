package node_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
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
	abandoned, undelivered := leftHoldingItCounts(t, b, id, p.Key)
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

// Seed 002: the same judgment for every counter — unanswered and
// undelivered reaching the tolerance withdraw the key as misdeclared does
// (TestWithdrawalAndTheWayBack); a run it holds still finishes over the
// open link.
func TestUnansweredAndUndeliveredWithdrawAtTolerance(t *testing.T) {
	for _, counter := range []string{"unanswered", "undelivered"} {
		t.Run(counter, func(t *testing.T) {
			h := nodetest.Start(t, func(c *configBroker) { c.ProviderQualityTolerance = 1 })
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			id, thread := h.Door(p.Key, "echo", "", "hi")
			p.Offer()
			if counter == "unanswered" {
				h.Settle()
				h.Advance(5 * time.Second)
			} else {
				p.Accept(id)
				h.WaitStatus(id, run.Running)
				h.Settle()
				h.Advance(1801 * time.Second)
			}
			h.Eventually("withdrawn", func() bool {
				return len(h.Node.Broker.Snapshot().Served) == 0 && h.Quality(p.Key).WithdrawnAt != nil
			})
			expectWithdrawalNotice(t, p)
			if counter == "unanswered" {
				// Queued, the agent unserved: the ordinary no-provider road.
				h.Advance(45 * time.Second)
				if r := h.WaitStatus(id, run.Failed); r.FailureReason != string(run.ReasonNoProviderTookIt) {
					t.Fatalf("failed %q, want no_provider_took_it", r.FailureReason)
				}
				return
			}
			p.Complete(id, thread)
			h.WaitStatus(id, run.Completed)
		})
	}
}

// provider_quality_tolerance 0 disables withdrawal: a key that keeps
// declining with room is counted every time and still served.
func TestToleranceZeroWithdrawsNobody(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.ProviderQualityTolerance = 0 })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	for range 4 {
		p.Offer()
		p.Decline(id)
		h.WaitStatus(id, run.Queued)
		p.Register("echo") // a change: offered again
	}
	p.Offer()
	p.Accept(id)
	p.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	if q := h.Quality(p.Key); q.Misdeclared != 4 || q.WithdrawnAt != nil {
		t.Fatalf("quality %+v, want 4 misdeclared and no withdrawal", q)
	}
}

// Answers to an offer from a provider unlike our SDK (D15: every report is
// taken or answered): an ack twice is taken; events before the ack claim
// the run, and the ack behind them is taken; a finish with no ack and no
// events claims and ends it (failed, provider_stream_ended_without_finishing);
// a decline after the claim, or an ack after the end, is answered with an
// error naming the run. None of it is counted.
func TestOddAnswersToAnOffer(t *testing.T) {
	for _, c := range []string{"ack twice", "events before ack", "finish without ack", "decline after claim", "ack after end"} {
		t.Run(c, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			id, thread := h.Door(p.Key, "echo", "", "hi")
			p.Offer()
			wantError := false
			switch c {
			case "ack twice":
				p.Accept(id)
				p.Accept(id)
			case "events before ack":
				p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
				p.Accept(id)
			case "finish without ack":
				p.Finish(id)
				if r := h.WaitStatus(id, run.Failed); r.FailureReason != string(run.ReasonStreamEndedWithoutFinishing) {
					t.Fatalf("failed %q", r.FailureReason)
				}
			case "decline after claim":
				p.Accept(id)
				p.Decline(id)
				wantError = true
			case "ack after end":
				p.Accept(id)
				p.Complete(id, thread)
				h.WaitStatus(id, run.Completed)
				p.Accept(id)
				wantError = true
			}
			// An ack is answered by the run's lane, not by the query's
			// barrier: the read loop hands everything on, the lanes settle,
			// then the barrier follows what they sent.
			got := p.ReadBarrier()
			h.Settle()
			got = append(got, p.Barrier()...)
			if !wantError && len(got) > 0 {
				t.Fatalf("unexpected frame: %s", got[0])
			}
			if wantError {
				var e wire.Error
				if len(got) != 1 || json.Unmarshal(got[0], &e) != nil || e.Type != wire.TypeError || e.RunID != id {
					t.Fatalf("frames %q, want one error naming %s", got, id)
				}
			}
			if c != "finish without ack" && c != "ack after end" {
				h.WaitStatus(id, run.Running)
				p.Complete(id, thread)
				h.WaitStatus(id, run.Completed)
			}
			h.Settle()
			if q := h.Quality(p.Key); charges(q) != 0 {
				t.Fatalf("counted %+v", q)
			}
		})
	}
}

// D2 across a takeover: a thread's head whose offer was out when the
// leader went, and the run queued behind it, are offered by the next
// leader in the order they came.
func TestThreadOrderSurvivesATakeover(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nil)
	p.Register("echo")
	first, thread := a.Door(p.Key, "echo", "", "one")
	if f := p.Offer(); f.RunID != first {
		t.Fatalf("offer %s", f.RunID)
	}
	second, _ := a.Door(p.Key, "echo", thread, "two")
	a.Taken(second)
	p.None() // the second waits behind the unanswered first
	a.Shutdown()
	b.Eventually("the standby leads", b.Ready)
	b.Taken(first)
	b.Taken(second)
	p2 := b.Connect(0xe1, nil)
	p2.Register("echo")
	if f := p2.Offer(); f.RunID != first {
		t.Fatalf("first offer after the takeover is %s, want the thread's head %s", f.RunID, first)
	}
	p2.None() // the second still waits for the first's answer
	p2.Accept(first)
	if f := p2.Offer(); f.RunID != second {
		t.Fatalf("second offer %s, want %s", f.RunID, second)
	}
}

// answered_late counts a claim that arrives after funduq gave up waiting
// for the offer (design.md §Counters). An offer that lapsed, then a later
// offer of the run answered in time with a decline: the provider's report
// for the run afterwards claims a queued run it was not offered, which
// counts nothing — the offer funduq gave up on was offered again and
// answered.
func TestClaimAfterAnsweredReofferIsNotLate(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	h.Settle()
	h.Advance(5 * time.Second) // unanswered
	h.WaitStatus(id, run.Queued)
	p.Register("echo") // a change: offered again
	if f := p.Offer(); f.RunID != id {
		t.Fatalf("offer %s", f.RunID)
	}
	p.Decline(id) // answered in time: misdeclared (unlimited)
	h.WaitStatus(id, run.Queued)
	h.Eventually("the decline is counted", func() bool { return h.Quality(p.Key).Misdeclared == 1 })
	p.Complete(id, thread) // it runs the run after all: a claim of a queued run
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if q := h.Quality(p.Key); q.Unanswered != 1 || q.Misdeclared != 1 || q.AnsweredLate != 0 || q.WithdrawnAt != nil {
		t.Fatalf("counted %+v, want unanswered 1 and misdeclared 1 alone", q)
	}
}

// A link of the key that registered nothing is offered nothing, so it
// answers no offer: its ack for a run offered to the key's serving link
// claims nothing, and the offered link's answer claims it. The ack is a
// report read before register (design.md D7): it waits behind the offer,
// is kept for the link's register while the offered link holds the run,
// and is refused naming the run when the run ends with no register.
func TestLinkThatRegisteredNothingAnswersNoOffer(t *testing.T) {
	h := nodetest.Start(t, nil)
	a := h.Connect(0xe1, nil)
	a.Register("echo")
	c := h.Connect(0xe1, nil) // registers nothing
	id, thread := h.Door(a.Key, "echo", "", "hi")
	a.Offer()
	c.Accept(id)
	c.ReadBarrier()
	h.Settle()
	a.Accept(id)
	a.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	var e wire.Error
	c.Expect(wire.TypeError, &e)
	if e.RunID != id || !strings.HasPrefix(e.Message, "ack refused: ") {
		t.Fatalf("told %+v, want the ack refused naming %s", e, id)
	}
	h.Settle()
	if q := h.Quality(a.Key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}
