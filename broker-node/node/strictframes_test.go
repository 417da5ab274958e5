package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// Every provider link frame goes through the doors' strict JSON check
// (core/strictjson): a repeated key (or invalid UTF-8) is answered with an
// error frame and changes nothing — not the roster, not a run's events.
// (An event whose own bytes fail the check fails its run instead:
// TestStrictRefusedEventFailsItsRun.)
func TestProviderFramesAreStrictJSON(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	runID, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(runID)
	p.Event(runID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, runID))
	for _, frame := range []string{
		`{"type":"register","agents":[{"name":"a"}],"agents":[{"name":"b"}]}`,
		`{"type":"register","agents":[{"name":"c","name":"d"}]}`,
		fmt.Sprintf(`{"type":"event","runId":%q,"runId":"run_other","event":{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}}`, runID),
		fmt.Sprintf(`{"type":"finish","runId":%q,"type":"finish"}`, runID),
		"{\"type\":\"deleteAgent\",\"name\":\"echo\xff\"}",
	} {
		p.SendRaw(frame)
		var e wire.Error
		p.Expect(wire.TypeError, &e)
		if !strings.Contains(e.Message, "repeats a key") && !strings.Contains(e.Message, "UTF-8") {
			t.Errorf("%s: error %q, want a strict JSON refusal", frame, e.Message)
		}
	}
	// The next good frames are the barrier: a run's events are stored in
	// the order sent, and the roster answers in order on the link.
	p.Event(runID, `{"type":"TEXT_MESSAGE_START","messageId":"m3","role":"assistant"}`)
	p.Register("echo", "z")
	h.Eventually("the good event stored", func() bool { return len(h.Events(runID)) >= 2 })
	if evs := h.Events(runID); len(evs) != 2 || evs[1]["messageId"] != "m3" {
		t.Fatalf("a refused frame was stored: %v", evs)
	}
	as, err := h.Store.ListAgents(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range as {
		names = append(names, a.Name)
	}
	if strings.Join(names, ",") != "echo,z" {
		t.Fatalf("agents %v", names)
	}
	if st := h.Run(runID).Status; st != "running" {
		t.Fatalf("run %s after refused frames", st)
	}
}

// An event frame that names its run once and whose event alone fails the
// strict check (a repeated key, invalid UTF-8) carries a malformed event:
// the run fails with that reason and the caller sees the end, as for any
// event that does not validate (design.md D18), instead of the event going
// missing from the caller's stream while the run carries on. A defect in
// the frame around the event refuses the frame naming the run (D15), and
// the run carries on.
func TestStrictRefusedEventFailsItsRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe2, nil)
	p.Register("echo")

	// The frame around a good event repeats a key: refused, naming the run.
	kept, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(kept)
	p.Event(kept, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, kept))
	p.SendRaw(fmt.Sprintf(`{"type":"event","runId":%q,"seq":7,"seq":8,"event":{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}}`, kept))
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.RunID != kept || !strings.Contains(e.Message, "repeats a key") {
		t.Errorf("frame around the event: error %+v, want the strict refusal naming run %s", e, kept)
	}

	for _, tc := range []struct{ name, event string }{
		{"repeated key", `{"type":"TEXT_MESSAGE_START","messageId":"m1","messageId":"m2","role":"assistant"}`},
		{"invalid UTF-8", "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"a\xffb\"}"},
	} {
		// One harness for every case (its helpers report on t), so no subtests.
		runID, thread := h.Door(p.Key, "echo", "", "hi")
		p.Offer()
		p.Accept(runID)
		p.Event(runID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, runID))
		p.SendRaw(fmt.Sprintf(`{"type":"event", "runId":%q, "event": %s }`, runID, tc.event))
		var e wire.Error
		p.Expect(wire.TypeError, &e)
		if e.RunID != runID {
			t.Errorf("%s: error %+v names no run, want %s", tc.name, e, runID)
		}
		h.Eventually("the run settled", func() bool {
			st := h.Run(runID).Status
			return st == "failed" || st == "completed" || st == "cancelled"
		})
		if r := h.Run(runID); r.Status != "failed" || r.FailureReason != string(run.ReasonMalformedEvent) {
			t.Fatalf("%s: run %s (%q), want failed: %s", tc.name, r.Status, r.FailureReason, run.ReasonMalformedEvent)
		}
		evs := h.Events(runID)
		if last := evs[len(evs)-1]; last["type"] != "RUN_ERROR" {
			t.Errorf("%s: the stored stream ends with %v, want RUN_ERROR", tc.name, last)
		}
	}

	// The run whose frame was refused carried on: its next event is stored.
	p.Event(kept, `{"type":"TEXT_MESSAGE_START","messageId":"m3","role":"assistant"}`)
	h.Eventually("the good event stored", func() bool { return len(h.Events(kept)) >= 2 })
	if r := h.Run(kept); r.Status != "running" {
		t.Errorf("run %s after a refused frame around its event, want running", r.Status)
	}
}
