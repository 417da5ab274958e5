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

// A provider that stops reading its link for a while (busy, paused) while
// it holds a run: funduq cuts the link off once its send queue is full
// ("provider is not reading its link"). The provider said no goodbye and
// may still be running the run, so the cut is a lost link (design.md D5):
// the run is held for the link grace, and the key coming back and
// reporting carries it on, with nothing counted.
func TestSlowReaderIsHeldLikeALostLink(t *testing.T) {
	// The grace runs on the harness's fake clock, which this test never
	// moves: the run is held however long the cut and the reconnect take
	// on a loaded machine; no wait here depends on how long they take.
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = time.Minute })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", strings.Repeat("long ", 4000))
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	// Ask for the thread again and again, reading none of the answers.
	params, _ := json.Marshal(wire.ThreadMessagesParams{ThreadID: thread})
	for i := range 8000 {
		p.Send(wire.Query{Type: wire.TypeQuery, QueryID: fmt.Sprintf("q%d", i), Method: "thread_messages", Params: params})
	}
	t.Cleanup(func() { p.Rest() }) // read at last, until the link closes
	h.Eventually("funduq cuts off the link", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("the run of a link cut off for not reading is %s (%s) inside the link grace", r.Status, r.FailureReason)
	}
	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	p2.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if q := h.Quality(p.Key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
}
