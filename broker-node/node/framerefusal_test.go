package node_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A report frame that does not decode but names its run is answered with
// an error frame naming that run and the field that is wrong (design.md
// D15), and the run is untouched: the provider's next, well-formed answer
// is taken.
func TestMistypedReportIsRefusedNamingItsRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(1, nil)
	p.Register("echo")
	runID, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	for _, tc := range []struct{ frame, want string }{
		{`{"type":"ack","runId":"` + runID + `","accepted":"yes"}`, "ack refused: accepted must be a boolean (got string)"},
		{`{"type":"event","runId":"` + runID + `"}`, "event refused: the frame carries no event"},
	} {
		p.SendRaw(tc.frame)
		var e wire.Error
		p.Expect(wire.TypeError, &e)
		if e.RunID != runID || e.Message != tc.want {
			t.Fatalf("%s: answered %+v, want %q naming %s", tc.frame, e, tc.want, runID)
		}
	}
	p.Accept(runID)
	p.Complete(runID, thread)
	h.WaitStatus(runID, run.Completed)
}
