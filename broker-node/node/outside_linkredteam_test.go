package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// An offer out to one process of a key (link a, declared 1) answered by
// another process of the key (link b, D15) moves the run to b, but a's own
// place stays taken until a answers the offer it was sent (docs/design.md
// D15): its process may hold the run in its slot until it hears its
// answer refused. a's answer — an ack taken into its slot as it came, or
// a decline — is refused, and then the run of a's agent waiting for that
// place is offered to a at once: not when the moved run ends, nor at the
// sweep's next nudge (the unserved window).
func TestOfferMovedToAnotherLinkFreesTheOfferedLinksPlaceAtItsAnswer(t *testing.T) {
	for _, answer := range []string{"ack", "decline"} {
		t.Run(answer, func(t *testing.T) {
			m := startMovedOffer(t, nil)
			h, a, b, first, second := m.h, m.a, m.b, m.first, m.second
			b.Accept(first) // b's process takes the run offered to a
			h.WaitStatus(first, run.Running)
			a.None() // a has not answered: its place is still taken
			if answer == "ack" {
				a.Accept(first)
			} else {
				a.Decline(first)
			}
			// Its answer is refused first, then its place is free.
			if _, f := a.Next(); !refusalOf(f, first) {
				t.Fatalf("a's %s of %s was answered %s, want its refusal", answer, first, f)
			}
			if f := a.Offer(); f.RunID != second {
				t.Fatalf("a was offered %s once it answered; want %s, its own place being free", f.RunID, second)
			}
			m.end(t)
		})
	}
}

// As above, but a never answers the offer that moved: its place is free
// once that offer's deliver_timeout passes (from when it was sent, not
// from the move), and nothing is counted — the run was answered in time,
// by b.
func TestOfferMovedToAnotherLinkFreesTheOfferedLinksPlaceAtItsDeliverTimeout(t *testing.T) {
	const timeout = 5 * time.Second
	m := startMovedOffer(t, func(c *configBroker) { c.DeliverTimeout = timeout })
	h, a, b, first, second := m.h, m.a, m.b, m.first, m.second
	h.Advance(timeout / 2) // the move comes late in the offer's wait
	b.Accept(first)
	h.WaitStatus(first, run.Running)
	h.Advance(timeout/2 - time.Millisecond)
	a.None() // the offer to a has not lapsed yet: its place is still taken
	h.Advance(time.Millisecond)
	if f := a.Offer(); f.RunID != second {
		t.Fatalf("a was offered %s at the moved offer's deliver_timeout; want %s", f.RunID, second)
	}
	m.end(t)
}

// movedOffer is the set-up of the tests above: links a (room for 1) and b
// (4) of one key, a's agent's first run offered to a, its second waiting
// for a's place.
type movedOffer struct {
	h                     *nodetest.Harness
	a, b                  *nodetest.Prov
	first, second, thread string
}

func startMovedOffer(t *testing.T, mut func(*configBroker)) movedOffer {
	t.Helper()
	m := movedOffer{h: nodetest.Start(t, mut)}
	m.a = m.h.Connect(0xe1, nodetest.Limit(1))
	m.a.Register("echo")
	m.b = m.h.Connect(0xe1, nodetest.Limit(4)) // the key's bucket: 4
	m.b.Register("other")
	m.first, m.thread = m.h.Door(m.a.Key, "echo", "", "one")
	if f := m.a.Offer(); f.RunID != m.first {
		t.Fatalf("offer %s, want %s", f.RunID, m.first)
	}
	m.second, _ = m.h.Door(m.a.Key, "echo", "", "two")
	m.h.Taken(m.second) // waits: a's process holds its 1
	return m
}

// end has a take the second run it was offered and b complete the first,
// and checks nothing was counted against a.
func (m movedOffer) end(t *testing.T) {
	t.Helper()
	m.a.Accept(m.second)
	m.h.WaitStatus(m.second, run.Running)
	m.b.Complete(m.first, m.thread)
	m.h.WaitStatus(m.first, run.Completed)
	m.h.Settle()
	if q := m.h.Quality(m.a.Key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// refusalOf reports whether frame f is an error frame naming run id.
func refusalOf(f []byte, id string) bool {
	var e wire.Error
	return json.Unmarshal(f, &e) == nil && e.Type == wire.TypeError && e.RunID == id
}

// Seed 001: "A resumed run is claimed afresh, so it gets a whole new
// window" — and the window is what counts undelivered. A run's first round
// counted undelivered, then paused; the caller's answer opened a second
// round, which the provider took and then blocked in past its own window,
// or left holding (a goodbye). Each round is a turn the provider took and
// did not return (the reference's resumed turn is the next run), so the
// second is counted too: once per round, never hidden by the first.
func TestResumedRoundIsCountedAfresh(t *testing.T) {
	for _, how := range []string{"undelivered", "abandoned"} {
		t.Run(how, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			id, thread := h.Door(p.Key, "echo", "", "slow")
			p.Offer()
			p.Accept(id)
			h.WaitStatus(id, run.Running)
			h.Settle()
			h.Advance(1801 * time.Second)
			h.Eventually("round one counted undelivered", func() bool { return h.Quality(p.Key).Undelivered == 1 })
			p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int_1","reason":"confirm"}]}}`, thread, id))
			p.Finish(id)
			h.WaitStatus(id, run.InputRequired)
			if _, err := h.Store.ReopenRun(t.Context(), store.Reopen{RunID: id}); err != nil {
				t.Fatal(err)
			}
			if f := p.Offer(); f.RunID != id {
				t.Fatalf("offer %s, want the answered round of %s", f.RunID, id)
			}
			p.Accept(id)
			h.WaitStatus(id, run.Running)
			h.Settle()
			switch how {
			case "undelivered":
				h.Advance(1801 * time.Second) // round two's own window
			case "abandoned":
				p.Goodbye()
				h.WaitStatus(id, run.Failed)
			}
			// The sweep counts on its own time: waited for, as round
			// one's count was.
			h.Eventually("round two counted as well", func() bool {
				q := h.Quality(p.Key)
				return q.Undelivered+q.Abandoned == 2
			})
		})
	}
}

// After another process of the key (b) answered the offer that went to a
// (D15), the run is b's: a's own answer — an accept, its events, its
// finish — is refused with an error naming the run (D15: never dropped
// unanswered), stores nothing and counts nothing; a's goodbye afterwards
// leaves b's run alone (a holds nothing); and a caller's cancel, asked
// while the offer was still out to a, goes to b, which runs it.
func TestOfferedLinkAfterAnotherLinkTookTheRun(t *testing.T) {
	for _, how := range []string{"reports", "goodbye", "cancel"} {
		t.Run(how, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			a := h.Connect(0xe1, nil)
			a.Register("echo")
			b := h.Connect(0xe1, nil)
			b.Register("other")
			id, thread := h.Door(a.Key, "echo", "", "hi")
			a.Offer()
			if how == "cancel" {
				// Asked while the offer is out: it waits behind the answer.
				if _, err := h.Store.RequestCancel(context.Background(), id, ""); err != nil {
					t.Fatal(err)
				}
				h.Settle()
			}
			b.Accept(id)
			if how == "cancel" {
				h.WaitStatus(id, run.Cancelling)
			} else {
				h.WaitStatus(id, run.Running)
			}
			h.Settle()
			switch how {
			case "reports":
				a.Accept(id)
				a.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
				a.Finish(id)
				for _, e := range refusals(t, a, a.Barrier(), 3) {
					if e.RunID != id {
						t.Fatalf("error %+v, want a refusal naming run %s", e, id)
					}
				}
				if r := h.Run(id); r.Status != run.Running || len(h.Events(id)) != 0 {
					t.Fatalf("a's reports moved b's run: %s with %d events", r.Status, len(h.Events(id)))
				}
			case "goodbye":
				a.Goodbye()
				h.Eventually("a's link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
				h.Settle()
				if r := h.Run(id); r.Status != run.Running {
					t.Fatalf("a left and b's run is %s (%s)", r.Status, r.FailureReason)
				}
			case "cancel":
				var c wire.Cancel
				b.Expect(wire.TypeCancel, &c)
				if c.RunID != id {
					t.Fatalf("cancel for %s, want %s", c.RunID, id)
				}
				if got := a.Barrier(); len(got) != 0 {
					t.Fatalf("a, which does not run it, was sent %s", got[0])
				}
			}
			b.Complete(id, thread)
			h.WaitStatus(id, run.Completed)
			h.Settle()
			if got := h.Node.Broker.Snapshot().InFlight[a.Key]; got != 0 {
				t.Fatalf("%d places of the key still taken after its run ended", got)
			}
			if q := h.Quality(a.Key); charges(q) != 0 {
				t.Fatalf("counted %+v", q)
			}
		})
	}
}

// A link that registered nothing answers no offer (D15): our SDK resends
// an unconfirmed paused round right after welcome, before register (D7),
// so that the resend never answers the answered round's offer. What the
// link had registered must be read as of when each report was read, not
// when its run's lane gets to it: a lane busy with a write (its offering
// write behind a slow PostgreSQL, here a held lock) reads the resend only
// after the register behind it, and took it then as the new round's
// answer — the run paused again on the old interrupt and the caller's
// answer was swallowed.
func TestResendBeforeRegisterAnswersNoOfferWhileTheLaneIsBusy(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.OfferingWriteAfter = 3 * time.Second })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "q")
	p.Offer()
	p.Accept(id)
	started, paused := pauseRawRound(h, p, id, thread)
	p.Close() // lost: the process never heard its finish was taken
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	a := h.Connect(0xe1, nil) // another process of the key serves echo
	a.Register("echo")
	if _, err := h.Store.ReopenRun(t.Context(), store.Reopen{RunID: id}); err != nil {
		t.Fatal(err)
	}
	if f := a.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want the answered round of %s", f.RunID, id)
	}
	release := h.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
	h.Eventually("the lane waits in its offering write", h.LockWaitsOn("runs"))
	back := h.Connect(0xe1, nil) // the first process, back: resend, then register
	back.SendRaw(started)
	back.SendRaw(paused)
	back.Finish(id)
	back.Register("other")
	back.ReadBarrier()
	release()
	h.Settle()
	if r := h.Run(id); r.Status == run.InputRequired {
		t.Fatalf("the run paused again on the old interrupt (%d events stored): the caller's answer was swallowed", len(h.Events(id)))
	}
	a.Accept(id) // the offered process answers; the resend behind it is refused
	for _, e := range refusals(t, back, back.Barrier(), 3) {
		if e.RunID != id {
			t.Fatalf("error %+v, want a refusal naming run %s", e, id)
		}
	}
	a.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	if evs := h.Events(id); len(evs) != 7 {
		t.Fatalf("stored %d events, want the paused round once and the answer's round", len(evs))
	}
}

// D5: a run whose offer was out on a link lost without a close frame goes
// back to queued and keeps its place in the key's bucket for the link
// grace, since the provider may have accepted it with an ack the link
// lost; "the key's report for it takes the place over". The key's other
// process (b, serving another agent) answering that offer just after a's
// link went: read a moment earlier, the ack claimed the run for b (D15);
// read after the loss it is the same answer from the same key.
func TestAnswerFromAnotherLinkAfterTheOfferedLinkWasLost(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	a := h.Connect(0xe1, nil)
	a.Register("echo")
	b := h.Connect(0xe1, nil)
	b.Register("other")
	id, thread := h.Door(a.Key, "echo", "", "hi")
	a.Offer()
	a.Close() // lost, no close frame
	h.Eventually("a's link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	h.Settle()
	b.Accept(id)
	got := b.Barrier()
	h.Settle()
	for _, f := range got {
		t.Logf("b was sent: %s", f)
	}
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("the key's answer left the run %s", r.Status)
	}
	b.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if got := h.Node.Broker.Snapshot().InFlight[a.Key]; got != 0 {
		t.Fatalf("%d places of the key still taken after its run ended", got)
	}
	if q := h.Quality(a.Key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
	// A link of the key that registered nothing is resending (D7): it
	// takes no place kept for the key.
	h2 := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	a = h2.Connect(0xe1, nil)
	a.Register("echo")
	id, _ = h2.Door(a.Key, "echo", "", "hi")
	a.Offer()
	a.Close()
	h2.Eventually("a's link is gone", func() bool { return h2.Node.Broker.Snapshot().Links == 0 })
	h2.Settle()
	c := h2.Connect(0xe1, nil)
	c.Accept(id)
	for _, e := range refusals(t, c, c.Barrier(), 1) {
		if e.RunID != id {
			t.Fatalf("error %+v, want a refusal naming run %s", e, id)
		}
	}
	if r := h2.Run(id); r.Status != run.Queued {
		t.Fatalf("a link that registered nothing left the run %s", r.Status)
	}
}

// docs/design.md D15: once another process of the key (b) answered the
// offer sent to a, a is not offered the next run before it answers that
// offer too. A process that acks every offer it is
// sent (as our SDK does) took the first into its only slot, and holds it
// until it hears the refusal of its ack: an offer read before that it
// declines, full of a run funduq sent it, and was counted misdeclared for
// it (D6), when a's place was free at once.
func TestOfferedLinkIsNotOfferedMoreBeforeItHearsTheMove(t *testing.T) {
	m := startMovedOffer(t, nil)
	h, a, b, first, second := m.h, m.a, m.b, m.first, m.second
	b.Accept(first)
	h.WaitStatus(first, run.Running)
	h.Settle()
	a.Accept(first) // a took it into its slot as it came
	var declined []string
	for heard := false; !heard; {
		typ, f := a.Next()
		var r wire.RunFrame
		switch {
		case refusalOf(f, first):
			heard = true // its slot is free again
		case typ == wire.TypeRun && json.Unmarshal(f, &r) == nil:
			a.Decline(r.RunID) // full: its slot holds the first
			declined = append(declined, r.RunID)
		default:
			t.Fatalf("unexpected frame: %s", f)
		}
	}
	if len(declined) > 0 {
		a.Barrier()
		h.Settle()
		t.Fatalf("a was offered %v before it heard its ack refused, declined it full of the run it was sent, and was counted %+v",
			declined, h.Quality(a.Key))
	}
	// Once it heard, its slot is free: the run waiting for it comes.
	if f := a.Offer(); f.RunID != second {
		t.Fatalf("a was offered %s once it heard the move; want %s", f.RunID, second)
	}
	m.end(t)
}
