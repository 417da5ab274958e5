package node_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// A second process of a key registers the agent the first serves (a
// rolling restart): the first process's link, left serving nothing, is
// replaced; it drops, and the run it holds passes to the new link. The new
// process never heard of that run; the old one, still running it, comes
// back on a link of its own to report. The run follows its reports (the
// same key, design.md D5): it completes, nothing is refused and nothing is
// counted, where it would otherwise sit running on a link that never
// reports for it and count undelivered.
func TestPassedRunFollowsItsKeysReports(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "x")
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	p.Close() // the replaced link drops
	old := h.Connect(0xe1, nil)
	old.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	old.None() // no report was refused
	p2.None()
	h.Settle()
	if q := h.Quality(p.Key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}
