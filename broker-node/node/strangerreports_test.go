package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// Two keys may each register the same agent name: they are two agents. A
// run of one is offered only to its own key, and the other key's reports
// for it are refused as for an unknown run.
func TestSameNameUnderTwoKeys(t *testing.T) {
	h := nodetest.Start(t, nil)
	one := h.Connect(0xe1, nil)
	one.Register("echo")
	two := h.Connect(0xe2, nil)
	two.Register("echo")
	id, thread := h.Door(two.Key, "echo", "", "for two")
	if f := two.Offer(); f.RunID != id {
		t.Fatalf("offer %s", f.RunID)
	}
	one.None()
	one.Accept(id)
	expectRefusal(t, one, id, "ack refused: unknown run")
	one.Finish(id)
	expectRefusal(t, one, id, "finish refused: unknown run")
	two.Accept(id)
	two.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	// One key taking its echo out of service leaves the other's alone.
	one.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "echo"})
	one.Expect(wire.TypeDeleted, nil)
	l := listing(t, h)
	if _, ok := l[one.Key[:4]+"/echo"]; ok || !l[two.Key[:4]+"/echo"].Online {
		t.Fatalf("listing %+v", l)
	}
	nothingCounted(t, h, one.Key, "the stranger")
}

// Frames sent after the handshake and before any register are each
// answered: reports for a run (another key's, or none) are refused as
// unknown, a deleteAgent says the agent is not registered, a query is
// answered, and the link then registers as usual.
func TestFramesBeforeRegister(t *testing.T) {
	h := nodetest.Start(t, nil)
	owner := h.Connect(0xe1, nil)
	owner.Register("echo")
	id, thread := h.Door(owner.Key, "echo", "", "hi")
	owner.Offer()
	p := h.Connect(0xe2, nil)
	p.Accept(id)
	expectRefusal(t, p, id, "ack refused: unknown run")
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	expectRefusal(t, p, id, "event refused: unknown run")
	p.Finish(id)
	expectRefusal(t, p, id, "finish refused: unknown run")
	p.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "echo"})
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.Name != "echo" || !strings.Contains(e.Message, "not registered") {
		t.Fatalf("error %+v", e)
	}
	p.SendRaw(`{"type":"query","queryId":"q1","method":"thread_messages","params":{"threadId":"` + thread + `"}}`)
	var r wire.QueryResult
	p.Expect(wire.TypeQueryResult, &r)
	if r.QueryID != "q1" || r.Error != noSuchThread || r.Result != nil {
		t.Fatalf("query answered %+v", r)
	}
	p.Register("echo")
	// The owner's run was untouched by all of it.
	owner.Accept(id)
	owner.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
}

const noSuchThread = "no such thread for this provider"

// A stranger's report for a run whose offer is out to its own provider is
// answered at once and says only "unknown run" (D15): it does not wait
// behind the offer (its timing would tell the stranger an offer is out),
// and the run ending meanwhile does not turn it into "the run has ended".
func TestStrangersReportDuringAnOfferSaysOnlyUnknown(t *testing.T) {
	h := nodetest.Start(t, nil)
	owner := h.Connect(0xe1, nil)
	owner.Register("echo")
	stranger := h.Connect(0xe2, nil)
	stranger.Register("echo")
	id, _ := h.Door(owner.Key, "echo", "", "hi")
	owner.Offer()
	stranger.Finish(id)
	owner.Refuse(id, "not today") // the run ends: its lane closes
	h.WaitStatus(id, run.Failed)
	expectRefusal(t, stranger, id, "finish refused: unknown run")
	id2, thread2 := h.Door(owner.Key, "echo", "", "again")
	owner.Offer()
	stranger.Event(id2, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread2, id2))
	expectRefusal(t, stranger, id2, "event refused: unknown run") // the offer is still out
	owner.Accept(id2)
	owner.Complete(id2, thread2)
	h.WaitStatus(id2, run.Completed)
}
