package a2a_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
)

// Seed 001, "Pausing and blocking": a run that pauses ends its round, so
// no clock runs against the provider while it waits, however long; and a
// resumed run is claimed afresh, with the whole undelivered window ahead
// of it — not what was left of the first round's.
func TestOutsideResumedRunGetsAWholeUndeliveredWindow(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("ask")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "ask", "")
	task := c.send(c.message("w-1", "may I?", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id := task["id"].(string)
	f := p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	h.Settle()
	h.Advance(1000 * time.Second)
	p.Event(id, runStarted(*f.ThreadID, id))
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ask-1","reason":"approval","message":"May I?"}]}}`, *f.ThreadID, id))
	p.Finish(id)
	h.WaitStatus(id, run.InputRequired)
	h.Advance(3 * time.Hour) // the person takes their time
	if q := h.Quality(p.Key); q.Undelivered != 0 {
		t.Fatalf("a pause was counted undelivered: %+v", q)
	}
	c.send(c.message("w-2", "yes", map[string]any{"taskId": id}), map[string]any{"configuration": map[string]any{"blocking": false}})
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	h.Settle()
	h.Advance(1799 * time.Second)
	if q := h.Quality(p.Key); q.Undelivered != 0 {
		t.Fatalf("the resumed round did not get a whole window: %+v", q)
	}
	h.Advance(2 * time.Second)
	h.Eventually("undelivered counted once the resumed round's window passed", func() bool { return h.Quality(p.Key).Undelivered == 1 })
}

// Seed 001/004: the undelivered window runs from the claim ("a provider
// still attached that has not delivered what it accepted inside the
// window"). A link that drops without a close frame and re-attaches
// within the link grace carries the run on (D5); that is not a new
// acceptance, so it does not start the window again — else a provider
// whose link blips more often than the window never counts undelivered
// for a run it holds for ever.
func TestOutsideReattachDoesNotRestartTheUndeliveredWindow(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	task := c.send(c.message("r-1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id := task["id"].(string)
	f := p.Offer()
	p.Accept(id)
	p.Event(id, runStarted(*f.ThreadID, id))
	h.WaitStatus(id, run.Running)
	h.Settle()
	h.Advance(1000 * time.Second)
	p.Close() // lost, no close frame
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	p2.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"still here"}`)
	p2.Barrier() // the event is stored: the run is re-adopted
	if st := h.Run(id).Status; st != run.Running {
		t.Fatalf("status %s after the re-attach", st)
	}
	h.Advance(801 * time.Second) // 1801 s since the claim
	h.Eventually("undelivered counted 1800 s after the claim", func() bool { return h.Quality(p.Key).Undelivered == 1 })
}
