package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Issue #21, fourth bullet: a link lost after the provider's RUN_FINISHED
// was stored but before its finish frame settles the run completed from
// what is stored — no RUN_ERROR after the RUN_FINISHED, nothing counted.
func TestStoredTerminalEventSettlesOnLinkLoss(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("both events stored", func() bool { return len(h.Events(id)) == 2 })
	p.Goodbye() // the finish never comes
	h.WaitStatus(id, run.Completed)
	if evs := h.Events(id); len(evs) != 2 || evs[1]["type"] != "RUN_FINISHED" {
		t.Fatalf("events %v: something was stored after RUN_FINISHED", evs)
	}
	h.Settle()
	if q := h.Quality(p.Key); q.Abandoned != 0 {
		t.Fatalf("a run that reported its end counted %+v", q)
	}
}

// The sweep settles the same way: a claimed run whose RUN_FINISHED is
// stored but whose finish never comes is completed at the undelivered
// window, not counted undelivered.
func TestSweepSettlesARunThatReportedItsEnd(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("the event stored", func() bool { return len(h.Events(id)) == 1 })
	h.Settle() // the lane has noted its claim and the stored end (the window's start)
	h.Advance(1801 * time.Second)
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if q := h.Quality(p.Key); q.Undelivered != 0 {
		t.Fatalf("a run that reported its end counted %+v", q)
	}
	if evs := h.Events(id); len(evs) != 1 {
		t.Fatalf("events %v", evs)
	}
}

// A RUN_ERROR funduq writes carries its reason as code and a sentence as
// message (issue #21 deliverable 7).
func TestSynthesizedRunErrorHasCodeAndSentence(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	p.Goodbye()
	h.Eventually("the agent goes offline", func() bool { return len(h.Node.Broker.Snapshot().Served) == 0 })
	id, _ := h.Door(p.Key, "echo", "", "hi")
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	evs := h.Events(id)
	if len(evs) != 1 || evs[0]["type"] != "RUN_ERROR" || evs[0]["code"] != string(run.ReasonAgentOffline) ||
		evs[0]["message"] == string(run.ReasonAgentOffline) || evs[0]["message"] == "" {
		t.Fatalf("terminal event %v, want code %s and a sentence", evs, run.ReasonAgentOffline)
	}
}
