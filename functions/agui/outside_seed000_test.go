package agui_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// D2 from outside: two callers, each through its own door instance, on one
// thread. The second caller's run waits silently behind the first — not
// offered while the first is unanswered or declined — and is offered once
// the first is claimed; each stream then carries its own run alone, on the
// thread funduq named, whatever order the provider finishes them in.
func TestOutsideTwoCallersOneThreadInArrivalOrder(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	first := aguiURL(startDoor(t, h, nil), p.Key, "echo")
	second := aguiURL(startDoor(t, h, nil), p.Key, "echo")

	s1 := openStream(t, "POST", first, input("caller-one", "r1", ""), nil)
	f1 := p.Offer()
	thread := *f1.ThreadID
	s2 := openStream(t, "POST", second, input(thread, "r2", ""), nil)
	h.Eventually("the second run is recorded", func() bool { return runCount(t, h) == 2 })
	p.None() // the second waits for the first's answer
	p.Decline(f1.RunID)
	h.WaitStatus(f1.RunID, run.Queued)
	p.None() // declined, the first is still the thread's head
	p.Register("echo")
	if f := p.Offer(); f.RunID != f1.RunID {
		t.Fatalf("offered %s, want the first caller's run %s again", f.RunID, f1.RunID)
	}
	p.Accept(f1.RunID)
	f2 := p.Offer()
	if f2.RunID == f1.RunID || *f2.ThreadID != thread {
		t.Fatalf("second offer %s on %s", f2.RunID, *f2.ThreadID)
	}
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, thread) // the later turn ends first: the provider's business
	p.Complete(f1.RunID, thread)
	for i, c := range []struct {
		s     *stream
		runID string
	}{{s1, f1.RunID}, {s2, f2.RunID}} {
		evs := events(c.s.rest())
		if len(evs) != 5 {
			t.Fatalf("caller %d got %d events, want its run's 5: %v", i+1, len(evs), typesOf(t, evs))
		}
		for _, f := range evs {
			e := f.event(t)
			if e["runId"] != nil && e["runId"] != c.runID || e["threadId"] != nil && e["threadId"] != thread {
				t.Fatalf("caller %d got another run's event: %v", i+1, e)
			}
		}
	}
	h.WaitStatus(f1.RunID, run.Completed)
	h.WaitStatus(f2.RunID, run.Completed)
	if q := h.Quality(p.Key); q.Misdeclared != 1 || q.Unanswered+q.AnsweredLate+q.Abandoned+q.Undelivered != 0 {
		t.Fatalf("counted %+v, want the one decline with room", q)
	}
}
