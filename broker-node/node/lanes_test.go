package node_test

import (
	"context"
	"fmt"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// Two runs of one thread are offered in arrival order, the second only once
// the first is claimed — and while the first is still running.
func TestThreadOrderUpToTheClaim(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	first, thread := h.Door(p.Key, "echo", "", "one")
	second, _ := h.Door(p.Key, "echo", thread, "two")
	if f := p.Offer(); f.RunID != first {
		t.Fatalf("first offer is %s, want %s", f.RunID, first)
	}
	p.None() // the second waits for the first's verdict
	if got := h.Run(second).Status; got != run.Queued {
		t.Fatalf("second run is %s while the first is unanswered", got)
	}
	p.Accept(first)
	if f := p.Offer(); f.RunID != second {
		t.Fatalf("second offer is %s, want %s", f.RunID, second)
	}
	if got := h.Run(first).Status; got != run.Running {
		t.Fatalf("first is %s: the second was offered before the first was claimed", got)
	}
}

// Two threads of one agent are offered side by side: one unanswered offer
// holds up nothing but its own thread.
func TestThreadsSideBySide(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	a, _ := h.Door(p.Key, "echo", "", "a")
	b, _ := h.Door(p.Key, "echo", "", "b")
	got := map[string]bool{p.Offer().RunID: true, p.Offer().RunID: true}
	if !got[a] || !got[b] {
		t.Fatalf("offers %v, want both %s and %s before any answer", got, a, b)
	}
}

// Capacity is per key, taken as the offer leaves, and never exceeded, even
// across two agents of one key and many concurrent runs.
func TestCapacityNeverExceeded(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(2))
	p.Register("a", "b")
	const n = 10
	threads := map[string]string{}
	for i := range n {
		agent := []string{"a", "b"}[i%2]
		id, th := h.Door(p.Key, agent, "", fmt.Sprint(i))
		threads[id] = th
	}
	outstanding := map[string]bool{}
	offered := 0
	for done := 0; done < n; {
		if len(outstanding) < 2 && offered < n {
			f := p.Offer()
			outstanding[f.RunID] = true
			offered++
			continue
		}
		if len(outstanding) == 2 {
			p.None() // full: nothing more is offered
			if got := h.Node.Broker.Snapshot().InFlight[p.Key]; got != 2 {
				t.Fatalf("in flight %d, want 2", got)
			}
		}
		for id := range outstanding { // finish one to free a place
			p.Accept(id)
			p.Complete(id, threads[id])
			h.WaitStatus(id, run.Completed)
			delete(outstanding, id)
			done++
			break
		}
	}
	if q := h.Quality(p.Key); q.Misdeclared != 0 || q.Unanswered != 0 {
		t.Fatalf("counters %+v", q)
	}
}

// A decline leaves the run queued and is counted once (the provider had
// room); the run is not offered again until something changes — here, the
// provider registering again.
func TestDeclineDoesNotSpin(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, _ := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Decline(id)
	h.WaitStatus(id, run.Queued)
	for range 10 {
		h.Advance(time.Second) // sweep ticks
	}
	p.None()
	h.Eventually("misdeclared counted", func() bool { return h.Quality(p.Key).Misdeclared == 1 })
	if got := h.Node.Broker.Snapshot().InFlight[p.Key]; got != 0 {
		t.Fatalf("a declined offer kept its place: in flight %d", got)
	}
	p.Register("echo") // something changed
	if f := p.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
}

// A declined head is never overtaken by its sibling.
func TestDeclinedHeadNotOvertaken(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	first, thread := h.Door(p.Key, "echo", "", "one")
	h.Door(p.Key, "echo", thread, "two")
	p.Offer()
	p.Decline(first)
	h.WaitStatus(first, run.Queued)
	p.None()
	p.Register("echo")
	if f := p.Offer(); f.RunID != first {
		t.Fatalf("offered %s first, want the declined head %s", f.RunID, first)
	}
}

// A refusal fails the run with the provider's reason, verbatim.
func TestRefusalRecordsReasonVerbatim(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, _ := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	reason := "frame does not validate as a DeliveredRun: state — Field required"
	p.Refuse(id, reason)
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != reason {
		t.Fatalf("reason %q", r.FailureReason)
	}
	evs := h.Events(id)
	if len(evs) != 1 || evs[0]["type"] != "RUN_ERROR" || evs[0]["message"] != reason {
		t.Fatalf("terminal event %v", evs)
	}
}

// An offer left unanswered goes back to queued and counts unanswered; an
// event from the key serving the agent is then a late ack: the run is
// recovered and answered_late is counted.
func TestLateAckRecoversTheRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	h.Advance(5 * time.Second) // deliver_timeout
	h.WaitStatus(id, run.Queued)
	h.Eventually("unanswered counted", func() bool { return h.Quality(p.Key).Unanswered == 1 })
	p.Accept(id) // too late: dropped silently
	p.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	h.Eventually("answered_late counted", func() bool { return h.Quality(p.Key).AnsweredLate == 1 })
	if n := len(h.Events(id)); n != 5 {
		t.Fatalf("%d events stored, want all 5", n)
	}
}

// A late ack from a key that does not serve the agent is not accepted.
func TestLateAckOnlyFromTheServingKey(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	stranger := h.Connect(0xe2, nil)
	stranger.Register("other")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	h.Advance(5 * time.Second)
	h.WaitStatus(id, run.Queued)
	stranger.Complete(id, thread)
	// The link reads frames in order and hands each report to the lane as
	// it reads it: once this frame is answered, every report above is in
	// the lane's queue, and Settle waits for the lane to judge them.
	stranger.SendRaw(`{"type":"frobnicate"}`)
	for {
		var e wire.Error
		stranger.Expect(wire.TypeError, &e)
		if strings.Contains(e.Message, "frobnicate") {
			break
		}
	}
	h.Settle()
	if got := h.Run(id).Status; got != run.Queued {
		t.Fatalf("a stranger's report moved the run to %s", got)
	}
	if len(h.Events(id)) != 0 {
		t.Fatal("a stranger's events were stored")
	}
}

// A cancel arriving while an offer is out is decided after the answer:
// accepted → cancelling and the cancel is passed on; declined → cancelled.
func TestCancelDuringOfferWaitsForTheAnswer(t *testing.T) {
	for _, accept := range []bool{true, false} {
		t.Run(fmt.Sprint("accept=", accept), func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			id, thread := h.Door(p.Key, "echo", "", "hi")
			p.Offer()
			if _, err := h.Store.RequestCancel(context.Background(), id, ""); err != nil {
				t.Fatal(err)
			}
			h.Settle()
			// Queued until the offer has been out FUNDUQ_OFFERING_WRITE_AFTER,
			// offering after: either way not cancelled yet.
			if got := h.Run(id).Status; got != run.Queued && got != run.Offering {
				t.Fatalf("status %s while the answer is out; the cancel must wait", got)
			}
			if !accept {
				p.Decline(id)
				h.WaitStatus(id, run.Cancelled)
				p.None()
				return
			}
			p.Accept(id)
			p.Expect("cancel", nil)
			h.WaitStatus(id, run.Cancelling)
			// The provider stops without finishing: cancelled.
			p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
			p.Finish(id)
			h.WaitStatus(id, run.Cancelled)
		})
	}
}

// A provider that ignores a cancel and finishes is recorded completed.
func TestCancelIgnoredIsCompleted(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	if _, err := h.Store.RequestCancel(context.Background(), id, ""); err != nil {
		t.Fatal(err)
	}
	p.Expect("cancel", nil)
	p.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
}

// A queued run is cancelled at once and never offered.
func TestCancelQueuedRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	busy, _ := h.Door(p.Key, "echo", "", "busy")
	p.Offer()
	p.Accept(busy)
	id, _ := h.Door(p.Key, "echo", "", "queued")
	h.Taken(id)
	if _, err := h.Store.RequestCancel(context.Background(), id, ""); err != nil {
		t.Fatal(err)
	}
	h.WaitStatus(id, run.Cancelled)
	p.None()
	if len(h.Events(id)) != 0 {
		t.Fatal("a cancelled run got events (AG-UI has no cancelled event)")
	}
}

// A provider leaving while it holds runs: they fail provider_left_holding_it
// and each counts abandoned; a queued run survives for its return.
func TestProviderLeavingHoldingRuns(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	held, _ := h.Door(p.Key, "echo", "", "held")
	p.Offer()
	p.Accept(held)
	h.WaitStatus(held, run.Running)
	queued, _ := h.Door(p.Key, "echo", "", "queued")
	h.Taken(queued)
	p.Close()
	r := h.WaitStatus(held, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	evs := h.Events(held)
	if last := evs[len(evs)-1]; last["type"] != "RUN_ERROR" {
		t.Fatalf("no terminal RUN_ERROR: %v", evs)
	}
	h.Eventually("abandoned counted", func() bool { return h.Quality(p.Key).Abandoned == 1 })
	if got := h.Run(queued).Status; got != run.Queued {
		t.Fatalf("queued run is %s after its provider left", got)
	}
	back := h.Connect(0xe1, nodetest.Limit(1))
	back.Register("echo")
	if f := back.Offer(); f.RunID != queued {
		t.Fatalf("offer %s, want the queued run", f.RunID)
	}
}

// An unserved agent's run fails agent_offline at once, with a RUN_ERROR.
func TestAgentOfflineAtIntake(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	p.Close()
	h.Eventually("the agent goes offline", func() bool { return len(h.Node.Broker.Snapshot().Served) == 0 })
	id, _ := h.Door(p.Key, "echo", "", "hi")
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	if evs := h.Events(id); len(evs) != 1 || evs[0]["type"] != "RUN_ERROR" {
		t.Fatalf("events %v", evs)
	}
}

// The unserved clock: a queued run whose agent lost its provider fails
// no_provider_took_it once the window passes from when it went unserved; a
// provider returning inside the window keeps it.
func TestUnservedClock(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	busy, _ := h.Door(p.Key, "echo", "", "busy")
	p.Offer()
	p.Accept(busy)
	kept, _ := h.Door(p.Key, "echo", "", "kept")
	h.Taken(kept)
	p.Close()
	h.WaitStatus(busy, run.Failed)
	h.Advance(30 * time.Second)
	back := h.Connect(0xe1, nodetest.Limit(1))
	back.Register("echo")
	if f := back.Offer(); f.RunID != kept {
		t.Fatalf("offer %s", f.RunID)
	}
	back.Decline(kept)
	h.WaitStatus(kept, run.Queued)
	back.Close()
	h.Eventually("unserved", func() bool { return len(h.Node.Broker.Snapshot().Served) == 0 })
	h.Advance(44 * time.Second)
	if got := h.Run(kept).Status; got != run.Queued {
		t.Fatalf("failed before the window passed: %s", got)
	}
	h.Advance(2 * time.Second)
	r := h.WaitStatus(kept, run.Failed)
	if r.FailureReason != string(run.ReasonNoProviderTookIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
}

// A claimed run not delivered within the window counts undelivered once and
// is left alone.
func TestUndeliveredIsCountedNotSettled(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	// The claim's commit shows before the lane notes when it claimed (the
	// window's start): advancing the clock between the two restarts the
	// window. The lane settled, the claim is noted.
	h.Settle()
	h.Advance(1801 * time.Second)
	h.Eventually("undelivered counted", func() bool { return h.Quality(p.Key).Undelivered == 1 })
	h.Advance(time.Hour)
	h.Settle()
	if q := h.Quality(p.Key); q.Undelivered != 1 {
		t.Fatalf("undelivered %d, want it counted once", q.Undelivered)
	}
	if got := h.Run(id).Status; got != run.Running {
		t.Fatalf("the window settled the run: %s", got)
	}
	p.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
}

// A malformed known event fails the run; an unknown type is relayed untouched.
func TestEventValidation(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	p.Event(id, `{"type":"FUTURE_EVENT","anything":[1,2,3]}`)
	p.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1"}`) // no delta
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonMalformedEvent) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	evs := h.Events(id)
	if len(evs) != 2 || evs[0]["type"] != "FUTURE_EVENT" || evs[1]["type"] != "RUN_ERROR" {
		t.Fatalf("events %v", evs)
	}
	_ = thread
}

// A stream that ends without RUN_FINISHED fails, with funduq's RUN_ERROR;
// an interrupt outcome pauses the run (input-required).
func TestFinishFunnel(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	a, _ := h.Door(p.Key, "echo", "", "a")
	p.Offer()
	p.Accept(a)
	p.Finish(a)
	r := h.WaitStatus(a, run.Failed)
	if r.FailureReason != string(run.ReasonStreamEndedWithoutFinishing) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	evs := h.Events(a)
	if len(evs) != 1 || evs[0]["code"] != string(run.ReasonStreamEndedWithoutFinishing) {
		t.Fatalf("events %v", evs)
	}
	b, thread := h.Door(p.Key, "echo", "", "b")
	p.Offer()
	p.Accept(b)
	p.Event(b, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int_1","reason":"confirm"}]}}`, thread, b))
	p.Finish(b)
	r = h.WaitStatus(b, run.InputRequired)
	if !strings.Contains(string(r.Interrupt), "int_1") {
		t.Fatalf("interrupt %s", r.Interrupt)
	}
}

// Withdrawal at tolerance, and the way back through the front door.
func TestWithdrawalAndTheWayBack(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.ProviderQualityTolerance = 2 })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	a, _ := h.Door(p.Key, "echo", "", "a")
	p.Offer()
	p.Decline(a)
	h.WaitStatus(a, run.Queued)
	p.Register("echo")
	p.Offer()
	p.Decline(a) // misdeclared = 2 = tolerance
	h.Eventually("withdrawn", func() bool {
		return len(h.Node.Broker.Snapshot().Served) == 0 && h.Quality(p.Key).WithdrawnAt != nil
	})
	q := h.Quality(p.Key)
	if q.Misdeclared != 2 || q.WithdrawnAt == nil {
		t.Fatalf("quality %+v", q)
	}
	// Register on the withdrawn link is refused with a word to reconnect.
	p.Send(map[string]any{"type": "register", "agents": []map[string]any{{"name": "echo"}}})
	var e struct{ Message string }
	p.Expect("error", &e)
	if !strings.Contains(e.Message, "reconnect") {
		t.Fatalf("error %q", e.Message)
	}
	// A new run is not offered to the withdrawn provider.
	b, _ := h.Door(p.Key, "echo", "", "b")
	h.WaitStatus(b, run.Failed)
	// The front door: a new link registers and is served, record intact.
	back := h.Connect(0xe1, nil)
	back.Register("echo")
	if f := back.Offer(); f.RunID != a {
		t.Fatalf("offer %s", f.RunID)
	}
	if q := h.Quality(p.Key); q.Misdeclared != 2 {
		t.Fatalf("the record was reset: %+v", q)
	}
	// Back in service (outside test: the console still said withdrawn):
	// the mark is gone, the counters stay.
	h.Settle()
	if q := h.Quality(p.Key); q.WithdrawnAt != nil || q.Misdeclared != 2 {
		t.Fatalf("after the way back the record reads %+v", q)
	}
	for _, pv := range h.Node.Broker.Snapshot().Providers {
		if pv.Key == p.Key && pv.Withdrawn {
			t.Fatalf("the provider view still says withdrawn: %+v", pv)
		}
	}
}

var _ = store.Misdeclared
