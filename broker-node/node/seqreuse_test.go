package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A provider's event seq is a resend guard (design.md D7): an event whose
// seq this round already stored is a resend and is stored once. A provider
// that numbers its events otherwise (a counter per link, per message) may
// send another event under a stored seq: that event is not a resend, and
// dropping it unanswered would lose it from the caller's stream while the
// provider believes it delivered. It is refused with an error frame naming
// the run (D15); a true resend (the same event) is still taken silently.
func TestAnotherEventUnderAStoredSeqIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	started := fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)
	frame := func(seq int, ev string) string {
		return fmt.Sprintf(`{"type":"event","runId":%q,"seq":%d,"event":%s}`, id, seq, ev)
	}
	p.SendRaw(frame(1, started))
	p.SendRaw(frame(1, started)) // a resend: taken
	p.SendRaw(frame(1, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`))
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.RunID != id || !strings.HasPrefix(e.Message, "event refused") {
		t.Fatalf("error %+v, want an event refusal naming run %s", e, id)
	}
	p.SendRaw(frame(2, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`))
	p.SendRaw(frame(3, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`))
	p.SendRaw(frame(4, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id)))
	p.Finish(id)
	h.WaitStatus(id, run.Completed)
	p.None() // nothing more was refused
	if evs := h.Events(id); len(evs) != 4 {
		t.Fatalf("stored %v, want the 4 distinct events", evs)
	}

	// The same within a claim's first events, and riding with the end.
	id, thread = h.Door(p.Key, "echo", "", "again")
	p.Offer()
	p.Accept(id)
	started = fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)
	p.SendRaw(frame(1, started))
	p.SendRaw(frame(1, `{"type":"CUSTOM","name":"a","value":1}`))
	p.SendRaw(frame(1, `{"type":"CUSTOM","name":"b","value":2}`))
	p.SendRaw(frame(2, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id)))
	p.Finish(id)
	for range 2 {
		var e wire.Error
		p.Expect(wire.TypeError, &e)
		if e.RunID != id || !strings.HasPrefix(e.Message, "event refused") {
			t.Fatalf("error %+v, want an event refusal naming run %s", e, id)
		}
	}
	h.WaitStatus(id, run.Completed)
	p.None()
	if evs := h.Events(id); len(evs) != 2 {
		t.Fatalf("stored %v, want RUN_STARTED and RUN_FINISHED", evs)
	}
}
