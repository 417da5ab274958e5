package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// Issue #19, deliverable 2: each lane phase driven alone — a fake link, a
// fake clock, the real store — with the expectations broker-node/node's
// tests hold for the same behaviours through a whole node. The status
// machine, the counters and the timers are design.md's.

var answerTypes = []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}

func checkEvents(t *testing.T, h *harness, id string, want []string) {
	t.Helper()
	if got := h.events(id); !slices.Equal(got, want) {
		t.Fatalf("events of %s: %v, want %v", id, got, want)
	}
}

func checkInFlight(t *testing.T, h *harness, key string, want int) {
	t.Helper()
	h.settle()
	if got := h.b.Snapshot().InFlight[key]; got != want {
		t.Fatalf("in flight %d, want %d", got, want)
	}
}

func checkQuality(t *testing.T, h *harness, key string, want store.Quality) {
	t.Helper()
	h.settle()
	q := h.quality(key)
	for _, c := range []store.Counter{store.Misdeclared, store.Unanswered, store.AnsweredLate, store.Abandoned, store.Undelivered} {
		if q.Get(c) != want.Get(c) {
			t.Fatalf("quality %+v, want %+v", q, want)
		}
	}
}

// Offer → accept → events → finish: the run is offered to the link serving
// its agent, claimed on the accept, its events stored in order, and it
// ends completed with its place given back and nothing counted.
func TestLaneOfferAcceptRelayFinish(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, limit(1))
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	h.waitStatus(id, run.Offering)
	checkInFlight(t, h, p.key, 1)
	p.accept(id)
	h.waitStatus(id, run.Running)
	p.complete(id, thread)
	h.waitStatus(id, run.Completed)
	checkEvents(t, h, id, answerTypes)
	checkInFlight(t, h, p.key, 0)
	checkQuality(t, h, p.key, store.Quality{})
	p.none()
	if _, ok := h.b.Snapshot().Lanes[id]; ok {
		t.Fatal("the completed run's lane is still open")
	}
}

// A decline hands the run back to queued and gives its place back; a
// decline while funduq believed the provider had room counts misdeclared.
// Nothing re-offers it until something changes (here a register), however
// often the sweep passes.
func TestLaneDecline(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, _ := h.door(p.key, "echo", "hi")
	p.offer()
	p.decline(id)
	h.waitStatus(id, run.Queued)
	h.eventually("misdeclared counted", func() bool { return h.quality(p.key).Misdeclared == 1 })
	for range 10 {
		h.sweepAt(time.Second, 1) // sweep passes: a declined run is not spun on
	}
	p.none() // not offered again: nothing changed and the nudge's window has not passed
	checkInFlight(t, h, p.key, 0)
	checkQuality(t, h, p.key, store.Quality{Misdeclared: 1})
	p.register("echo") // something changed
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
}

// A refusal fails the run with the provider's reason, verbatim, and one
// RUN_ERROR; nothing is counted.
func TestLaneRefuseWithReason(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, _ := h.door(p.key, "echo", "hi")
	p.offer()
	reason := "frame does not validate as a DeliveredRun: state — Field required"
	p.refuse(id, reason)
	r := h.waitStatus(id, run.Failed)
	if r.FailureReason != reason {
		t.Fatalf("reason %q, want %q", r.FailureReason, reason)
	}
	checkEvents(t, h, id, []string{"RUN_ERROR"})
	checkInFlight(t, h, p.key, 0)
	checkQuality(t, h, p.key, store.Quality{})
	p.none()
}

// An offer left unanswered for deliver_timeout goes back to queued and
// counts unanswered. It is not offered again at once; the sweep's nudge
// (every unserved window) offers it again.
func TestLaneOfferTimeout(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, _ := h.door(p.key, "echo", "hi")
	p.offer()
	h.waitStatus(id, run.Offering)
	h.advance(5 * time.Second) // deliver_timeout
	h.waitStatus(id, run.Queued)
	h.eventually("unanswered counted", func() bool { return h.quality(p.key).Unanswered == 1 })
	p.none() // requeued, not offered again
	checkInFlight(t, h, p.key, 0)
	h.advance(45 * time.Second) // the sweep's nudge
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	h.waitStatus(id, run.Offering)
	checkQuality(t, h, p.key, store.Quality{Unanswered: 1})
}

// An ack after the offer lapsed is a late ack from the key serving the
// agent: the run is claimed and answered_late is counted besides the
// unanswered; its events are all stored.
func TestLaneLateAck(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	p.offer()
	h.waitStatus(id, run.Offering)
	h.advance(5 * time.Second)
	h.waitStatus(id, run.Queued)
	h.eventually("unanswered counted", func() bool { return h.quality(p.key).Unanswered == 1 })
	p.accept(id)
	h.waitStatus(id, run.Running)
	h.eventually("answered_late counted", func() bool { return h.quality(p.key).AnsweredLate == 1 })
	p.complete(id, thread)
	h.waitStatus(id, run.Completed)
	checkEvents(t, h, id, answerTypes)
	checkInFlight(t, h, p.key, 0)
	checkQuality(t, h, p.key, store.Quality{Unanswered: 1, AnsweredLate: 1})
	p.none() // the late ack was taken, not refused
}

// A cancel while an offer is out waits for the answer: accepted, the run
// goes cancelling and the cancel is passed on; declined, it is cancelled.
func TestLaneCancelDuringOffer(t *testing.T) {
	for _, accept := range []bool{true, false} {
		t.Run(fmt.Sprint("accept=", accept), func(t *testing.T) {
			h := newHarness(t, Settings{})
			p := h.connect(0xe1, nil)
			p.register("echo")
			id, thread := h.door(p.key, "echo", "hi")
			p.offer()
			h.waitStatus(id, run.Offering)
			h.cancel(id)
			h.settle()
			if got := h.run(id).Status; got != run.Offering {
				t.Fatalf("status %s while the answer is out; the cancel must wait", got)
			}
			if !accept {
				p.decline(id)
				h.waitStatus(id, run.Cancelled)
				p.none()
				checkEvents(t, h, id, []string{})
				checkInFlight(t, h, p.key, 0)
				return
			}
			p.accept(id)
			p.expect(wire.TypeCancel)
			h.waitStatus(id, run.Cancelling)
			// The provider stops without its end: cancelled.
			p.event(id, started(id, thread))
			p.finish(id)
			h.waitStatus(id, run.Cancelled)
			checkInFlight(t, h, p.key, 0)
			p.none()
		})
	}
}

// A link lost without a close frame holds its runs for the link grace: the
// same key re-attaching and reporting carries on (completed, nothing
// counted); a run nobody comes back for fails provider_left_holding_it once
// the grace passes, and only then counts abandoned. A goodbye fails its
// held run at once.
func TestLaneLinkLossWhileHolding(t *testing.T) {
	h := newHarness(t, Settings{LinkGrace: 5 * time.Second})
	p := h.connect(0xe1, limit(2))
	p.register("echo")
	kept, keptThread := h.door(p.key, "echo", "kept")
	p.offer()
	p.accept(kept)
	p.event(kept, started(kept, keptThread))
	lost, _ := h.door(p.key, "echo", "lost")
	p.offer()
	p.accept(lost)
	h.waitStatus(lost, run.Running)
	h.eventually("first event stored", func() bool { return len(h.events(kept)) == 1 })

	p.lost()
	h.settle()
	for _, id := range []string{kept, lost} {
		if got := h.run(id).Status; got != run.Running {
			t.Fatalf("a run of a lost link is %s inside the link grace", got)
		}
	}
	checkInFlight(t, h, p.key, 2) // their places are kept for the provider

	p2 := h.connect(0xe1, limit(2))
	p2.register("echo")
	p2.answer(kept, keptThread)
	h.waitStatus(kept, run.Completed)
	checkEvents(t, h, kept, answerTypes)
	checkQuality(t, h, p.key, store.Quality{})
	checkInFlight(t, h, p.key, 1)

	h.advance(5 * time.Second) // the link grace
	r := h.waitStatus(lost, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	checkEvents(t, h, lost, []string{"RUN_ERROR"})
	h.eventually("abandoned counted once the grace passed", func() bool { return h.quality(p.key).Abandoned == 1 })
	checkInFlight(t, h, p.key, 0)

	bye, _ := h.door(p.key, "echo", "bye")
	if got := p2.offer(); got != bye {
		t.Fatalf("offered %s, want %s", got, bye)
	}
	p2.accept(bye)
	h.waitStatus(bye, run.Running)
	p2.goodbye()
	r = h.waitStatus(bye, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	h.eventually("abandoned counted at the goodbye", func() bool { return h.quality(p.key).Abandoned == 2 })
	checkInFlight(t, h, p.key, 0)
	checkQuality(t, h, p.key, store.Quality{Abandoned: 2})
	p.none()
}

// A run left running by a previous epoch is read back at takeover and
// re-adopted when its provider re-registers and reports for it: it carries
// on under the new epoch. One nobody re-adopts within provider_grace fails
// orphaned_by_funduq_restart. A takeover counts nothing.
func TestLaneTakeoverReadoption(t *testing.T) {
	h := newHarness(t, Settings{ProviderGrace: 30 * time.Second})
	p := h.connect(0xe1, limit(2))
	p.register("echo")
	adopted, thread := h.door(p.key, "echo", "adopted")
	p.offer()
	p.accept(adopted)
	p.event(adopted, started(adopted, thread))
	orphan, _ := h.door(p.key, "echo", "orphan")
	p.offer()
	p.accept(orphan)
	h.waitStatus(orphan, run.Running)
	h.eventually("first event stored", func() bool { return len(h.events(adopted)) == 1 })
	before := h.epoch

	h.shutdown() // the leader goes away; its links are closed
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed == "" {
		t.Fatal("the old leader's link was not closed")
	}
	h.lead()
	if h.epoch <= before {
		t.Fatalf("epoch %d after %d", h.epoch, before)
	}
	h.settle()
	for _, id := range []string{adopted, orphan} {
		if got := h.run(id).Status; got != run.Running {
			t.Fatalf("a held run is %s after the takeover, inside provider_grace", got)
		}
	}
	checkInFlight(t, h, p.key, 2) // kept for the provider presumed running them

	p2 := h.connect(0xe1, limit(2))
	p2.register("echo")
	p2.answer(adopted, thread)
	r := h.waitStatus(adopted, run.Completed)
	if r.OwnerEpoch != h.epoch {
		t.Fatalf("completed under epoch %d, want %d", r.OwnerEpoch, h.epoch)
	}
	checkEvents(t, h, adopted, answerTypes)
	checkInFlight(t, h, p.key, 1)

	h.advance(30 * time.Second) // provider_grace
	r = h.waitStatus(orphan, run.Failed)
	if r.FailureReason != string(run.ReasonOrphanedByRestart) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	checkEvents(t, h, orphan, []string{"RUN_ERROR"})
	checkInFlight(t, h, p.key, 0)
	checkQuality(t, h, p.key, store.Quality{})
	p2.none()
}

// One cancel frame per link: a cancel asked for again (a caller asking
// twice, the intake's catch-up finding the request before the lane has
// read the notice) sends the provider holding the run nothing more, so a
// provider that answers the one cancel with its finish is not sent
// another for a run it has ended.
func TestLaneCancelAskedAgainIsSentOnce(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	p.takes(id)
	h.cancel(id)
	p.expect(wire.TypeCancel)
	h.waitStatus(id, run.Cancelling)
	h.cancel(id)
	h.b.CatchUp(context.Background(), "poll")
	p.none()
	p.event(id, started(id, thread))
	p.finish(id)
	h.waitStatus(id, run.Cancelled)
	p.none()
}

// A broker whose leadership has ended refuses no report: its links close
// with "stopped leading; reconnect" and the provider resends to the next
// leader. A refusal read in between (the lanes gone, the link not yet
// closed) told our SDK that funduq had its finished run ("finish refused:
// unknown run" confirms it), so it never resent it and the next leader
// held the run until provider_grace failed it, its report lost (the
// failover chaos test, seed 146).
func TestEndedLeadershipRefusesNoReport(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	p.takes(id)
	p.event(id, started(id, thread))
	h.eventually("the event stored", func() bool { return len(h.events(id)) == 1 })
	p.closeGate, p.closing = make(chan struct{}), make(chan struct{})
	stopped := make(chan struct{})
	go func() { defer close(stopped); h.shutdown() }()
	<-p.closing // leadership ended, every lane stopped; the link not yet closed
	p.finish(id)
	p.event(id, `{"type":"STEP_STARTED","stepName":"s"}`)
	h.b.Ack(p, id, wire.Accepted, "")
	p.mu.Lock()
	rest := p.frames[p.read:]
	p.mu.Unlock()
	close(p.closeGate)
	<-stopped
	for _, f := range rest {
		t.Errorf("sent after leadership ended: %s", f)
	}
}

// A cancel requested while the run is held for its lost link is passed on
// once the provider re-adopts it, and the record says cancelling then, as
// for a cancel of a claimed run; the provider's stop ends it cancelled.
func TestLaneCancelWhileHeldIsRecordedOnReadoption(t *testing.T) {
	h := newHarness(t, Settings{LinkGrace: 5 * time.Second})
	id := h.heldRun(0xe1)
	h.cancel(id)
	h.settle()
	if got := h.run(id).Status; got != run.Running {
		t.Fatalf("a held run is %s after a cancel request", got)
	}

	p2 := h.connect(0xe1, nil)
	p2.register("echo")
	p2.event(id, `{"type":"STEP_STARTED","stepName":"s"}`)
	p2.expect(wire.TypeCancel)
	h.waitStatus(id, run.Cancelling)
	p2.finish(id)
	h.waitStatus(id, run.Cancelled)
}

// An accept whose claim the record refuses — the run was ended meanwhile
// by a writer other than this lane (a seeded fault: the row is set
// cancelled under the offer) — is answered: the provider is asked to
// cancel, the lane closes and gives its place back, and the next run is
// offered to the same provider.
func TestLaneRefusedClaimClosesTheLane(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, limit(1))
	p.register("echo")
	id, _ := h.door(p.key, "echo", "hi")
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	// The offering write goes beside the frame: seeded before it lands,
	// the end refuses that write instead, and the accept is answered as
	// one for an ended run (an error naming it), not through the claim.
	h.waitStatus(id, run.Offering)
	if _, err := h.st.Pool().Exec(context.Background(),
		`UPDATE runs SET status = 'cancelled', completed_at = now() WHERE run_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	p.accept(id)
	var c wire.Cancel
	if err := json.Unmarshal(p.expect(wire.TypeCancel), &c); err != nil || c.RunID != id {
		t.Fatalf("cancel %+v (%v), want one for %s", c, err, id)
	}
	h.eventually("the lane closes", func() bool { _, ok := h.b.Snapshot().Lanes[id]; return !ok })
	next, _ := h.door(p.key, "echo", "next")
	if got := p.offer(); got != next {
		t.Fatalf("offered %s, want the next run %s", got, next)
	}
}

// A provider re-attaching and reporting for a held run the record no
// longer holds (a seeded fault: the row set failed under the hold) is
// answered — an error naming the run as ended, and a cancel — and the
// lane closes; the leader does not spend its write retries on a refusal
// that cannot change, nor step down over it.
func TestLaneRefusedReadoptionClosesTheLane(t *testing.T) {
	h := newHarness(t, Settings{LinkGrace: 5 * time.Second, StoreRetryFor: 2 * time.Second})
	id := h.heldRun(0xe1)
	h.settle()
	if _, err := h.st.Pool().Exec(context.Background(),
		`UPDATE runs SET status = 'failed', failure_reason = 'seeded', completed_at = now() WHERE run_id = $1`, id); err != nil {
		t.Fatal(err)
	}

	p2 := h.connect(0xe1, nil)
	p2.register("echo")
	p2.event(id, `{"type":"STEP_STARTED","stepName":"s"}`)
	seen := map[string]bool{}
	for !seen[wire.TypeError] || !seen[wire.TypeCancel] {
		typ, f := p2.next()
		if typ == wire.TypeError && !strings.Contains(string(f), id) {
			t.Fatalf("error frame %s does not name the run", f)
		}
		seen[typ] = true
	}
	h.eventually("the lane closes", func() bool { _, ok := h.b.Snapshot().Lanes[id]; return !ok })
	if leading, _ := h.b.Leading(); !leading {
		t.Fatal("the leader stepped down over a refused re-adoption")
	}
	if r := h.run(id); r.Status != run.Failed || r.FailureReason != "seeded" {
		t.Fatalf("the record was rewritten: %s %q", r.Status, r.FailureReason)
	}
}

// heldRun is a run its provider (seed) took and started, then held by the
// lane because the link was lost without a close frame (the harness needs
// a link grace).
func (h *harness) heldRun(seed byte) string {
	h.t.Helper()
	p := h.connect(seed, nil)
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	p.takes(id)
	p.event(id, started(id, thread))
	h.eventually("first event stored", func() bool { return len(h.events(id)) == 1 })
	p.lost()
	return id
}
