package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
)

// Every provider link frame goes through the doors' strict JSON check
// (core/strictjson): a repeated key (or invalid UTF-8) is answered with an
// error frame and changes nothing — not the roster, not a run's events.
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
		fmt.Sprintf(`{"type":"event","runId":%q,"event":{"type":"TEXT_MESSAGE_START","messageId":"m1","messageId":"m2","role":"assistant"}}`, runID),
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
