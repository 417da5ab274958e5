package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// expectRefusal reads frames until an error frame for runID arrives and
// checks its message starts with prefix. Offers read on the way are returned.
func expectRefusal(t *testing.T, p *nodetest.Prov, runID, prefix string) (offers []wire.RunFrame) {
	t.Helper()
	for {
		typ, f := p.Next()
		switch typ {
		case wire.TypeRun:
			var r wire.RunFrame
			_ = jsonUnmarshal(f, &r)
			offers = append(offers, r)
			continue
		case wire.TypeError:
			var e wire.Error
			_ = jsonUnmarshal(f, &e)
			if e.RunID != runID || !strings.HasPrefix(e.Message, prefix) {
				t.Fatalf("error frame %+v, want run %s and %q", e, runID, prefix)
			}
			return offers
		default:
			t.Fatalf("frame %s while waiting for a refusal: %s", typ, f)
		}
	}
}

// Issue #21, first bullet: after a takeover requeued the runs whose offers
// were out, the provider re-attaches with a small capacity; the new leader's
// re-offer fills its bucket, and the provider reports (events, finish) for
// the other requeued run, which it had accepted before the old leader died.
// The report claims that run — even with the bucket full — and it
// completes; nothing counts answered_late (funduq never gave up on it), and
// both places come back.
func TestReportClaimsARequeuedRunWhenTheBucketIsFull(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nodetest.Limit(2))
	p.Register("echo")
	x, xThread := a.Door(p.Key, "echo", "", "x")
	y, yThread := a.Door(p.Key, "echo", "", "y")
	p.Offer()
	p.Offer() // both offers out, neither answered when the leader goes
	a.Shutdown()
	b.Eventually("b leads", b.Ready)

	p2 := b.Connect(0xe1, nodetest.Limit(1))
	p2.Register("echo")
	first := p2.Offer() // the bucket is full now
	other, otherThread := x, xThread
	if first.RunID == x {
		other, otherThread = y, yThread
	}
	p2.Complete(other, otherThread)
	b.WaitStatus(other, run.Completed)
	if n := len(b.Events(other)); n != 5 {
		t.Fatalf("%d events stored, want 5", n)
	}
	p2.Accept(first.RunID)
	firstThread := xThread
	if first.RunID == y {
		firstThread = yThread
	}
	p2.Complete(first.RunID, firstThread)
	b.WaitStatus(first.RunID, run.Completed)
	b.Settle()
	if q := b.Quality(p.Key); q.AnsweredLate != 0 || q.Abandoned != 0 {
		t.Fatalf("counted %+v for a takeover requeue", q)
	}
	if got := b.Node.Broker.Snapshot().InFlight[p.Key]; got != 0 {
		t.Fatalf("in flight %d after both runs ended, want 0", got)
	}
}

// Every report the broker does not take is answered with an error frame
// naming the run and the reason (D15): an ack, event or finish for a run it
// does not hold; an event from another key for a run it does hold (the
// stranger hears only "unknown run"); a decline for an offer that lapsed;
// an event after the run's terminal event (not stored).
func TestEveryRefusedReportIsAnswered(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	stranger := h.Connect(0xe2, nil)
	stranger.Register("other")

	p.Accept("run_nosuch")
	expectRefusal(t, p, "run_nosuch", "ack refused: unknown run")
	p.Event("run_nosuch", `{"type":"RUN_STARTED","threadId":"t","runId":"run_nosuch"}`)
	expectRefusal(t, p, "run_nosuch", "event refused: unknown run")
	p.Finish("run_nosuch")
	expectRefusal(t, p, "run_nosuch", "finish refused: unknown run")

	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	h.Advance(5 * time.Second) // deliver_timeout: the offer lapses
	h.WaitStatus(id, run.Queued)
	p.Decline(id)
	expectRefusal(t, p, id, "ack refused: no offer out for this run")

	p.Accept(id) // a late accept claims it
	h.WaitStatus(id, run.Running)
	stranger.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	expectRefusal(t, stranger, id, "event refused: unknown run")

	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("two events stored", func() bool { return len(h.Events(id)) == 2 })
	p.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m9","role":"assistant"}`)
	expectRefusal(t, p, id, "event refused: the run already reported its end")
	p.Finish(id)
	h.WaitStatus(id, run.Completed)
	if evs := h.Events(id); len(evs) != 2 || evs[1]["type"] != "RUN_FINISHED" {
		t.Fatalf("events %v: something was stored after RUN_FINISHED", evs)
	}
	p.Finish(id)
	expectRefusal(t, p, id, "finish refused") // unknown run, or the run has ended while its lane closes
}

// runWithBadEvent plays run i of p's echo agent up to bad, an event that
// fails validation, and waits until the run has failed.
func runWithBadEvent(h *nodetest.Harness, p *nodetest.Prov, i int, bad string) (string, store.Run) {
	id, thread := h.Door(p.Key, "echo", "", fmt.Sprint("bad ", i))
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	p.Event(id, bad)
	return id, h.WaitStatus(id, run.Failed)
}

// Issue #21, second bullet: a handler that emits a known AG-UI type failing
// validation fails its run (named reason, a terminal RUN_ERROR) and is told
// so, but counts nothing: three such runs do not withdraw the key, and its
// agent is still offered the next run. The operator sees the count in
// /metrics.
func TestMalformedEventsDoNotWithdrawTheProvider(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	for i := range 3 {
		id, r := runWithBadEvent(h, p, i, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1"}`) // no delta
		if r.FailureReason != string(run.ReasonMalformedEvent) {
			t.Fatalf("reason %q", r.FailureReason)
		}
		expectRefusal(t, p, id, "event refused: "+string(run.ReasonMalformedEvent))
	}
	h.Settle()
	if q := h.Quality(p.Key); q.Abandoned != 0 || q.WithdrawnAt != nil {
		t.Fatalf("malformed events counted %+v", q)
	}
	id, thread := h.Door(p.Key, "echo", "", "good")
	if f := p.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
	p.Accept(id)
	p.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	if m := metrics(t, h); !strings.Contains(m, `funduq_broker_provider_events_refused_total{reason="provider sent a malformed AG-UI event"} 3`) {
		t.Fatalf("metrics lack the malformed count:\n%s", grepLines(m, "refused"))
	}
}

// Issue #21, third bullet (the broker's side): a provider that takes its
// agent out of service (deleteAgent) while an offer is out, and declines
// that offer, is not charged misdeclared — it no longer serves the agent
// (design.md §Counters). The run waits queued.
func TestDeclineAfterLeavingServiceIsNotMisdeclared(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	for i := range 3 {
		id, _ := h.Door(p.Key, "echo", "", fmt.Sprint("drain ", i))
		p.Offer()
		p.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "echo"})
		p.Expect(wire.TypeError, nil) // the record has history: kept, but out of service
		p.Decline(id)
		h.WaitStatus(id, run.Queued)
		h.Settle()
		p.Register("echo") // back in service for the next round
		if f := p.Offer(); f.RunID != id {
			t.Fatalf("offer %s, want %s", f.RunID, id)
		}
		p.Accept(id)
		h.WaitStatus(id, run.Running)
	}
	if q := h.Quality(p.Key); q.Misdeclared != 0 || q.WithdrawnAt != nil {
		t.Fatalf("declines while out of service counted %+v", q)
	}
}
