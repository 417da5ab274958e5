package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A link replaced by a newer link of its key is told so and left open; it
// is closed when the newer link goes, leaving its agent served by no link
// (design.md §Two processes of one key). Its provider may have written
// reports before funduq's close reached it — the rest of a run it holds,
// the run's finish — and a WebSocket peer may send until it reads the
// close frame (RFC 6455 §5.5.1). Those reports are the key's (D5: a report
// from any link of the key takes the run along); dropping them unread
// leaves the run running with nobody to end it, until the undelivered
// window counts against an honest provider.
func TestReportsInFlightOnAReplacedLinkAreTaken(t *testing.T) {
	h := nodetest.Start(t, nil)
	p1 := h.Connect(0xe1, nil)
	p1.Register("echo")
	id, thread := h.Door(p1.Key, "echo", "", "hi")
	p1.Offer()
	p1.Accept(id)
	p1.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("the first event stored", func() bool { return len(h.Events(id)) == 1 })

	// Another process of the key registers the agent: p1's link is
	// replaced, and closed once that process leaves. funduq's close frame
	// reaches p1 while p1 is writing the rest of its run; p1 answers the
	// close after its finish.
	seen, release := p1.HoldCloseReply()
	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	var e wire.Error
	p1.Expect(wire.TypeError, &e)
	if !strings.Contains(e.Message, "replaced by a newer link") {
		t.Fatalf("error %q, want the replacement", e.Message)
	}
	p2.Goodbye()
	<-seen
	p1.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p1.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`)
	p1.Event(id, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p1.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	p1.Finish(id)
	release()
	if rest := p1.Rest(); len(rest) != 0 {
		t.Errorf("frames after the close frame: %s", rest)
	}

	h.WaitStatus(id, run.Completed)
	if evs := h.Events(id); len(evs) != 5 {
		t.Errorf("stored %d events, want the 5 sent: %v", len(evs), evs)
	}
	h.Settle()
	if q := h.Quality(p1.Key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
}

// A process told its link was replaced (D5) can finish the runs it holds
// without taking the agents back: funduq leaves the replaced link open,
// but when it drops (or an older funduq closed it), a link that attaches
// and registers nothing takes nothing over, and its reports for the key's
// passed runs are taken. Our SDK does this and then stops, so a rolling
// deploy settles on the newer process (design.md D5); here a raw provider
// does it.
func TestReplacedProcessFinishesItsRunsWithoutRegistering(t *testing.T) {
	h := nodetest.Start(t, nil)
	old, newer, id, thread := startedThenReplaced(t, h, 0xe1)
	var e wire.Error
	old.Expect(wire.TypeError, &e)
	if !strings.Contains(e.Message, "replaced by a newer link") {
		t.Fatalf("error %q, want the replacement", e.Message)
	}
	old.Close() // its link drops

	// The old process comes back only to finish its run: no register.
	back := h.Connect(0xe1, nil)
	back.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	back.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`)
	back.Event(id, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	back.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	back.Finish(id)
	h.WaitStatus(id, run.Completed)
	back.None() // nothing refused
	if evs := h.Events(id); len(evs) != 5 {
		t.Errorf("stored %d events, want 5", len(evs))
	}
	// The newer process serves on, undisturbed: the next run is its.
	next, _ := h.Door(old.Key, "echo", "", "again")
	if o := newer.Offer(); o.RunID != next {
		t.Fatalf("offer %s, want %s", o.RunID, next)
	}
	h.Settle()
	if q := h.Quality(old.Key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
	back.Goodbye()
	newer.None()
}

// startedThenReplaced registers echo on a link of key seed, has it take a
// run and store its RUN_STARTED, then registers a newer link of the same
// key, which replaces it (design.md D5).
func startedThenReplaced(t *testing.T, h *nodetest.Harness, seed byte) (old, newer *nodetest.Prov, id, thread string) {
	t.Helper()
	old = h.Connect(seed, nil)
	old.Register("echo")
	id, thread = h.Door(old.Key, "echo", "", "hi")
	old.Offer()
	old.Accept(id)
	old.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("the first event stored", func() bool { return len(h.Events(id)) == 1 })
	newer = h.Connect(seed, nil)
	newer.Register("echo")
	return old, newer, id, thread
}
