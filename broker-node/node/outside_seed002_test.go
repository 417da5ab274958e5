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

// Seed 002 ("Provider quality counters") read line by line against raw
// providers that do not behave as our SDK does. Each test names the
// sentence it shows; docs/design.md §Counters is the table they check.

// expectRefusalOf reads frames until the error frame naming runID, which
// must start with prefix; offers read meanwhile are returned.
func expectRefusalOf(t *testing.T, p *nodetest.Prov, runID, prefix string) (offers []string) {
	t.Helper()
	for {
		typ, f := p.Next()
		switch typ {
		case wire.TypeRun:
			var r wire.RunFrame
			_ = json.Unmarshal(f, &r)
			offers = append(offers, r.RunID)
		case wire.TypeError:
			var e wire.Error
			_ = json.Unmarshal(f, &e)
			if e.RunID != runID || !strings.HasPrefix(e.Message, prefix) {
				t.Fatalf("error frame %+v, want run %s and %q", e, runID, prefix)
			}
			return offers
		default:
			t.Fatalf("unexpected frame: %s", f)
		}
	}
}

// Misdeclared is "declining a run while claiming to have room", and a
// malformed event "fails the run with its reason and moves no counter
// that withdraws" (D18). A provider that declared room for one is told
// its run failed for a bad event, but it still holds that run until it
// has unwound it and said so (its finish): it has no room yet. Offered
// the next run in that moment it declines it, honestly, and must not be
// charged; the next run is offered once the finish is read.
func TestOutsideSeed002DeclineWhileUnwindingARunFailedForABadEvent(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	a, thread := h.Door(p.Key, "echo", "", "a")
	if f := p.Offer(); f.RunID != a {
		t.Fatalf("offer %s, want %s", f.RunID, a)
	}
	p.Accept(a)
	h.WaitStatus(a, run.Running)
	b, bThread := h.Door(p.Key, "echo", "", "b") // waits behind the full provider
	h.Taken(b)
	p.Event(a, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, a))
	p.Event(a, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1"}`) // no delta
	offers := expectRefusalOf(t, p, a, "event refused: "+string(run.ReasonMalformedEvent))
	h.WaitStatus(a, run.Failed)
	h.Settle()
	for _, f := range p.Barrier() {
		var r wire.RunFrame
		if json.Unmarshal(f, &r) != nil || r.Type != wire.TypeRun {
			t.Fatalf("unexpected frame: %s", f)
		}
		offers = append(offers, r.RunID)
	}
	// Still unwinding a: an offer now is declined, as our SDK declines one
	// while a's handler has not returned.
	for _, id := range offers {
		p.Decline(id)
	}
	h.Settle()
	if len(offers) > 0 {
		p.Barrier() // the declines are read
		h.Settle()
	}
	if q := h.Quality(p.Key); q.Misdeclared != 0 {
		t.Fatalf("declined %v while unwinding the failed run and was counted misdeclared %d", offers, q.Misdeclared)
	}
	p.Finish(a) // unwound: the run funduq ended is answered as ended
	if more := expectRefusalOf(t, p, a, "finish refused"); len(more) > 0 {
		t.Fatalf("offered %v before the finish was answered", more)
	}
	if f := p.Offer(); f.RunID != b {
		t.Fatalf("offer %s, want %s", f.RunID, b)
	}
	p.Accept(b)
	p.Complete(b, bThread)
	h.WaitStatus(b, run.Completed)
	h.Settle()
	if q := h.Quality(p.Key); charges(q) != 0 {
		t.Fatalf("an honest provider was counted %+v", q)
	}
}

// The place a run failed for a bad event keeps on its link is the
// provider's until it finishes the run — or deliver_timeout passes, so a
// provider that never sends that finish is not one place short for good:
// the next run is offered then.
func TestOutsideSeed002PlaceOfARunFailedForABadEventComesBackWithoutAFinish(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	a, _ := h.Door(p.Key, "echo", "", "a")
	p.Offer()
	p.Accept(a)
	h.WaitStatus(a, run.Running)
	b, bThread := h.Door(p.Key, "echo", "", "b")
	h.Taken(b)
	p.Event(a, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1"}`) // no delta
	if offers := expectRefusalOf(t, p, a, "event refused: "); len(offers) > 0 {
		t.Fatalf("offered %v into the place of the run being unwound", offers)
	}
	h.WaitStatus(a, run.Failed)
	p.None()                   // no finish, no offer
	h.Advance(5 * time.Second) // deliver_timeout
	if f := p.Offer(); f.RunID != b {
		t.Fatalf("offer %s, want %s", f.RunID, b)
	}
	p.Accept(b)
	p.Complete(b, bThread)
	h.WaitStatus(b, run.Completed)
	h.Settle()
	if q := h.Quality(p.Key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}
