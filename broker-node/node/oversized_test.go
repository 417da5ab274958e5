package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// An event over the link's frame limit (FUNDUQ_MAX_FRAME_BYTES) is an
// oversized event as much as one over FUNDUQ_MAX_EVENT_BYTES (design.md
// D18): its frame is read through and dropped, answered with an error frame
// naming its run, the run fails provider_sent_an_oversized_event and nothing
// that withdraws is counted. The link stays open: the provider's other
// work carries on, and a frame over the limit that names no run is refused
// naming none.
func TestEventOverTheFrameLimitCountsNothing(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.MaxFrame, c.MaxEventBytes = 4096, 1024 })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "big")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	p.Event(id, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":%q}`, strings.Repeat("x", 8000)))
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.RunID != id {
		t.Fatalf("error %+v, want one naming run %s", e, id)
	}
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonEventTooLarge) {
		t.Errorf("reason %q, want %q", r.FailureReason, run.ReasonEventTooLarge)
	}
	if evs := h.Events(id); len(evs) != 2 || evs[1]["type"] != "RUN_ERROR" {
		t.Errorf("stored %v, want RUN_STARTED and the RUN_ERROR", evs)
	}

	p.SendRaw(`{"type":"register","agents":[{"name":"echo","description":"` + strings.Repeat("d", 8000) + `"}]}`)
	var e2 wire.Error
	p.Expect(wire.TypeError, &e2)
	if e2.RunID != "" {
		t.Errorf("error %+v names a run, want none", e2)
	}
	h.CompletedRun(p, "echo", "next") // the link carries on
	h.Settle()
	if q := h.Quality(p.Key); charges(q) != 0 || q.WithdrawnAt != nil {
		t.Errorf("an oversized event counted %+v", q)
	}
}
