package agui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/internal/nodejs"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// aguiClientRun runs e2e/events.mjs (one turn of the official
// @ag-ui/client HttpAgent) against agent name of p through the door, while
// serve plays the provider on the wire, and returns the client's report.
func aguiClientRun(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, name string, serve func()) (rep struct {
	Error    *string
	Types    []string
	State    json.RawMessage
	Messages json.RawMessage
}) {
	t.Helper()
	node, dir := nodejs.Project(t, "e2e", "@ag-ui/client")
	srv := startDoor(t, h, nil)
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	cmd := exec.CommandContext(ctx, node, "events.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FUNDUQ_DOOR="+srv.URL, "FUNDUQ_PROVIDER="+p.Key, "FUNDUQ_AGENT="+name, "NODE_ENV=test")
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serve()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node events.mjs: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	return rep
}

// TestOutsideAGUIClientTakesNullValuedRequiredFields: AG-UI lets a
// STATE_SNAPSHOT's snapshot, a CUSTOM's value and a RAW's event be any
// JSON value, null included (a provider resetting its state sends
// "snapshot":null). funduq stores such a run; the official client must
// get those events with the member still there, not an event missing a
// required field that its verification refuses.
func TestOutsideAGUIClientTakesNullValuedRequiredFields(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xa7, nil)
	p.Register("nulls")
	rep := aguiClientRun(t, h, p, "nulls", func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Event(f.RunID, runStartedFor(f))
		p.Event(f.RunID, `{"type":"STATE_SNAPSHOT","snapshot":{"n":1}}`)
		p.Event(f.RunID, `{"type":"STATE_SNAPSHOT","snapshot":null}`)
		p.Event(f.RunID, `{"type":"CUSTOM","name":"reset","value":null}`)
		p.Event(f.RunID, `{"type":"RAW","event":null,"source":"upstream"}`)
		p.Event(f.RunID, `{"type":"RUN_FINISHED","threadId":"`+*f.ThreadID+`","runId":"`+f.RunID+`"}`)
		p.Finish(f.RunID)
	})
	if rep.Error != nil {
		t.Fatalf("the official client refused the stream: %s (applied %v)", *rep.Error, rep.Types)
	}
	want := []string{"RUN_STARTED", "STATE_SNAPSHOT", "STATE_SNAPSHOT", "CUSTOM", "RAW", "RUN_FINISHED"}
	if got, _ := json.Marshal(rep.Types); string(got) != mustJSON(want) {
		t.Errorf("client applied %s, want %s", got, mustJSON(want))
	}
}

// TestOutsideAGUIClientTakesARichRun: a provider that is not our SDK emits
// the event shapes an AG-UI agent may use beyond plain text — steps, a
// streamed tool call and its result, the chunk forms, interleaved messages,
// state snapshot and JSON Patch delta, a messages snapshot, reasoning, RAW
// and CUSTOM, optional timestamp/rawEvent/parentMessageId, emoji — and the
// official client applies every one of them.
func TestOutsideAGUIClientTakesARichRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xa8, nil)
	p.Register("rich")
	evs := []string{
		`{"type":"STEP_STARTED","stepName":"plan","timestamp":1733440000000}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant","rawEvent":{"id":"upstream-1"}}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m2","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"héllo 👋🏽 "}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m2","delta":"日本語 \u2028 \"q\""}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m2"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"wörld"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"lookup","parentMessageId":"m1"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"q\":"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"\"☕\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c1","content":"42","role":"tool"}`,
		`{"type":"STEP_FINISHED","stepName":"plan"}`,
		`{"type":"STATE_SNAPSHOT","snapshot":{"count":1,"tags":["a"]}}`,
		`{"type":"STATE_DELTA","delta":[{"op":"replace","path":"/count","value":2},{"op":"add","path":"/tags/-","value":"🎉"}]}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m3","role":"assistant","delta":"chunk "}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m3","delta":"two"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"c2","toolCallName":"other","parentMessageId":"m3","delta":"{}"}`,
		`{"type":"REASONING_START","messageId":"r1"}`,
		`{"type":"REASONING_MESSAGE_START","messageId":"r1m","role":"reasoning"}`,
		`{"type":"REASONING_MESSAGE_CONTENT","messageId":"r1m","delta":"thinking…"}`,
		`{"type":"REASONING_MESSAGE_END","messageId":"r1m"}`,
		`{"type":"REASONING_END","messageId":"r1"}`,
		`{"type":"RAW","event":{"upstream":true},"source":"openai"}`,
		`{"type":"CUSTOM","name":"progress","value":{"pct":50}}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"go"},{"id":"m1","role":"assistant","content":"héllo 👋🏽 wörld","toolCalls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"☕\"}"}}]},{"id":"t1","role":"tool","toolCallId":"c1","content":"42"}]}`,
	}
	rep := aguiClientRun(t, h, p, "rich", playsEvents(p, evs))
	if rep.Error != nil {
		t.Fatalf("the official client refused the stream: %s (applied %v)", *rep.Error, rep.Types)
	}
	if len(rep.Types) != len(evs)+6 { // RUN_STARTED, RUN_FINISHED; the chunk runs expand by 4
		t.Errorf("client applied %d events %v", len(rep.Types), rep.Types)
	}
	if string(rep.State) != `{"count":2,"tags":["a","🎉"]}` {
		t.Errorf("client state %s", rep.State)
	}
	if !strings.Contains(string(rep.Messages), `"content":"héllo 👋🏽 wörld"`) {
		t.Errorf("client messages %s", rep.Messages)
	}
}

// playsEvents is a provider's side of one run: accept the offer, send
// RUN_STARTED, evs and RUN_FINISHED, then finish.
func playsEvents(p *nodetest.Prov, evs []string) func() {
	return func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Event(f.RunID, runStartedFor(f))
		for _, ev := range evs {
			p.Event(f.RunID, ev)
		}
		p.Event(f.RunID, `{"type":"RUN_FINISHED","threadId":"`+*f.ThreadID+`","runId":"`+f.RunID+`"}`)
		p.Finish(f.RunID)
	}
}
