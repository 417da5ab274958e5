package broker

import (
	"context"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// offeringLater is an OfferingAfter no test outlives: the offering write
// happens only when a test makes it due (due).
const offeringLater = time.Hour

// due makes the first offer of runID's lane due for its offering write, as
// the OfferingAfter timer does.
func due(h *harness, runID string) {
	h.t.Helper()
	h.b.mu.Lock()
	l := h.b.lanes[runID]
	h.b.mu.Unlock()
	if l == nil {
		h.t.Fatalf("no lane for %s", runID)
	}
	l.q.push(offeringDueCmd{1})
}

// laneOpen reports whether the broker still has a lane for runID.
func laneOpen(h *harness, runID string) bool {
	_, ok := h.b.Snapshot().Lanes[runID]
	return ok
}

// An offer answered before its offering write is claimed from queued: the
// record never says offering, and the round runs and ends as any other.
func TestOfferAnsweredBeforeItsWriteIsClaimedFromQueued(t *testing.T) {
	h := newHarness(t, Settings{OfferingAfter: offeringLater})
	p := h.connect(0xe1, limit(1))
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	h.settle()
	if got := h.run(id).Status; got != run.Queued {
		t.Fatalf("status %s with the offer out and not yet due, want queued", got)
	}
	checkInFlight(t, h, p.key, 1)
	p.accept(id)
	h.waitStatus(id, run.Running)
	p.complete(id, thread)
	h.waitStatus(id, run.Completed)
	checkEvents(t, h, id, answerTypes)
	checkInFlight(t, h, p.key, 0)
	checkQuality(t, h, p.key, store.Quality{})
	p.none()
}

// An offer still unanswered when it falls due is written offering; an
// answer after that claims it from offering, as without the wait.
func TestOfferUnansweredIsWrittenOfferingWhenDue(t *testing.T) {
	h := newHarness(t, Settings{OfferingAfter: time.Millisecond})
	p := h.connect(0xe1, limit(1))
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	h.waitStatus(id, run.Offering)
	p.accept(id)
	h.waitStatus(id, run.Running)
	p.complete(id, thread)
	h.waitStatus(id, run.Completed)
	checkInFlight(t, h, p.key, 0)
	checkQuality(t, h, p.key, store.Quality{})
	p.none()
}

// A decline before the offering write has nothing to write back: the run
// stays queued and its lane offers it again when the provider has room.
// One handed back for a run no longer queued (another writer ended it
// meanwhile) closes its lane, as the refused offering write would have.
func TestOfferHandedBackBeforeItsWrite(t *testing.T) {
	t.Run("still queued", func(t *testing.T) {
		h := newHarness(t, Settings{OfferingAfter: offeringLater})
		p := h.connect(0xe1, nil)
		p.register("echo")
		id, thread := h.door(p.key, "echo", "hi")
		p.offer()
		p.decline(id)
		h.settle()
		if got := h.run(id).Status; got != run.Queued || !laneOpen(h, id) {
			t.Fatalf("after a decline before the write: status %s, lane open %v; want queued, open", got, laneOpen(h, id))
		}
		checkInFlight(t, h, p.key, 0)
		p.register("echo") // the link's agents change: its lanes are tried again
		p.takes(id)
		p.complete(id, thread)
		h.waitStatus(id, run.Completed)
	})
	t.Run("ended meanwhile", func(t *testing.T) {
		h := newHarness(t, Settings{OfferingAfter: offeringLater})
		p := h.connect(0xe1, nil)
		p.register("echo")
		id, _ := h.door(p.key, "echo", "hi")
		p.offer()
		endUnderTheLane(h, id)
		p.decline(id)
		h.eventually("the lane closes", func() bool { return !laneOpen(h, id) })
		checkInFlight(t, h, p.key, 0)
		if got := h.run(id).Status; got != run.Cancelled {
			t.Fatalf("status %s, want the other writer's cancelled", got)
		}
		p.none()
	})
}

// endUnderTheLane ends runID as another writer would (a cancel recorded
// beside the lane), without the lane hearing of it.
func endUnderTheLane(h *harness, runID string) {
	h.t.Helper()
	if _, err := h.st.Transition(context.Background(), store.Move{RunID: runID, To: run.Cancelled, Writer: run.ByBroker, Epoch: h.epoch}); err != nil {
		h.t.Fatal(err)
	}
}

// The offering write falling due for a run another writer ended meanwhile
// is refused: the offer is retracted (the provider is sent a cancel) and
// the lane closes, as when the write went with the frame.
func TestOfferingWriteDueForARunNoLongerQueued(t *testing.T) {
	h := newHarness(t, Settings{OfferingAfter: offeringLater})
	p := h.connect(0xe1, limit(1))
	p.register("echo")
	id, _ := h.door(p.key, "echo", "hi")
	p.offer()
	endUnderTheLane(h, id)
	due(h, id)
	p.expect(wire.TypeCancel)
	h.eventually("the lane closes", func() bool { return !laneOpen(h, id) })
	checkInFlight(t, h, p.key, 0)
	p.accept(id) // too late: the offer was taken back
	p.expect(wire.TypeError)
	if got := h.run(id).Status; got != run.Cancelled {
		t.Fatalf("status %s, want cancelled", got)
	}
}

// An accept for a run another writer ended before the offering write is
// refused by the claim: the provider is told to cancel and the lane
// closes (claimRefused), the check the write would have made.
func TestOfferAcceptedForARunNoLongerQueued(t *testing.T) {
	h := newHarness(t, Settings{OfferingAfter: offeringLater})
	p := h.connect(0xe1, limit(1))
	p.register("echo")
	id, _ := h.door(p.key, "echo", "hi")
	p.offer()
	endUnderTheLane(h, id)
	p.accept(id)
	p.expect(wire.TypeCancel)
	h.eventually("the lane closes", func() bool { return !laneOpen(h, id) })
	checkInFlight(t, h, p.key, 0)
	if got := h.run(id).Status; got != run.Cancelled {
		t.Fatalf("status %s, want cancelled", got)
	}
}
