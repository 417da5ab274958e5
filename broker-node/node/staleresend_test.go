package node_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// A paused round resent before register (design.md D7) answers no round
// its caller's answer opened, however late the lane gets to it: here the
// resend waits behind an offer of the answered run to another link of the
// key, and the resending link registers (taking the agent over) before
// the lane reads it. Taken then as the key's late
// ack, the stale round was stored as the answer's and the run paused again
// on the old question — the caller's answer swallowed, the handler never
// given it (failover chaos around an interrupt, seeds 7 and 11).
func TestPausedRoundResentBeforeRegisterAnswersNoLaterOffer(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xf9, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "ask me")
	p.Offer()
	p.Accept(id)
	round := []string{
		fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id),
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"proceed?"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"q1","reason":"confirm"}]}}`, thread, id),
	}
	resend := func(p *nodetest.Prov) {
		for i, ev := range round {
			seq := int64(i + 1)
			p.Send(wire.Event{Type: wire.TypeEvent, RunID: id, Event: json.RawMessage(ev), ProviderSeq: &seq})
		}
		p.Finish(id)
	}
	resend(p)
	h.WaitStatus(id, run.InputRequired)
	p.Close() // its link lost: the key is expected back within the link grace
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })

	// The caller answers; nobody serves the agent, so the run waits.
	input := fmt.Sprintf(`{"threadId":%q,"runId":%q,"state":{},"messages":[],"tools":[],"context":[],"forwardedProps":{},"resume":[{"interruptId":"q1","status":"resolved","payload":"yes"}]}`, thread, id)
	if _, err := h.Store.ReopenRun(t.Context(), store.Reopen{RunID: id, RunInput: []byte(input)}); err != nil {
		t.Fatal(err)
	}
	h.Taken(id)
	// A link of the key registers and is offered the answered run, which
	// it does not answer yet: what other links report waits behind it.
	first := h.Connect(0xf9, nil)
	first.Register("echo")
	if f := first.Offer(); f.RunID != id {
		t.Fatalf("offered %s, want %s", f.RunID, id)
	}
	// Another link of the key resends the paused round before it
	// registers, then registers: the agent moves to it, and the first
	// link, left serving nothing, is replaced and its offer moved.
	stale := h.Connect(0xf9, nil)
	resend(stale)
	stale.Register("echo") // read after the resend, on the same link

	// The answered round is offered to the link serving the agent, with
	// the answer; the stale round is not stored again.
	expectReplaced(t, first)
	h.Settle()
	if r := h.Run(id); r.Status == run.InputRequired {
		t.Fatalf("the run paused again on the old question, the answer swallowed: stored %v", storedTypes(h, id))
	}
	// The resent reports are refused as for a run nobody holds (D7), each
	// answered; then the offer.
	var f wire.RunFrame
	for f.RunID == "" {
		typ, frame := stale.Next()
		switch typ {
		case wire.TypeError:
			if !strings.Contains(string(frame), "unknown run") {
				t.Fatalf("the resend was refused with %s, want unknown run", frame)
			}
		case wire.TypeRun:
			_ = json.Unmarshal(frame, &f)
		default:
			t.Fatalf("frame %s before the offer", frame)
		}
	}
	if f.RunID != id || !strings.Contains(string(f.RunInput), `"interruptId":"q1"`) {
		t.Fatalf("offered %s with %s, want %s with the answer", f.RunID, f.RunInput, id)
	}
	stale.Accept(id)
	stale.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	want := "RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END RUN_FINISHED RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END RUN_FINISHED"
	if got := storedTypes(h, id); got != want {
		t.Errorf("stored %v, want the paused round once, then the answer's", got)
	}
}

func storedTypes(h *nodetest.Harness, id string) string {
	var types []string
	for _, e := range h.Events(id) {
		types = append(types, fmt.Sprint(e["type"]))
	}
	return strings.Join(types, " ")
}
