package node_test

import (
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"testing"

	"github.com/funduq/funduq-go/core/run"
)

// A run a door inserts is offered, accepted, streamed and completed; its
// events are stored in order and its answer joins the thread.
func TestRunEndToEnd(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	f := p.Offer()
	if f.RunID != id || f.AgentName != "echo" || *f.ThreadID != thread || string(f.Metadata) != "{}" {
		t.Fatalf("offer %+v", f)
	}
	if string(f.RunInput) != string(h.Run(id).RunInput) {
		t.Fatal("the offer is not the stored input byte for byte")
	}
	p.Accept(id)
	p.Complete(id, thread)
	r := h.WaitStatus(id, run.Completed)
	if r.StartedAt == nil || r.CompletedAt == nil || r.LastSeq != 5 {
		t.Fatalf("run %+v", r)
	}
	evs := h.Events(id)
	if len(evs) != 5 || evs[0]["type"] != "RUN_STARTED" || evs[4]["type"] != "RUN_FINISHED" {
		t.Fatalf("events %v", evs)
	}
	msgs, _ := h.Store.ThreadMessages(t.Context(), thread, 0)
	if len(msgs) != 2 {
		t.Fatalf("thread has %d messages, want the caller's and the agent's: %s", len(msgs), msgs)
	}
	h.Settle()
	if got := h.Node.Broker.Snapshot().InFlight[p.Key]; got != 0 {
		t.Fatalf("place not given back: in flight %d", got)
	}
}
