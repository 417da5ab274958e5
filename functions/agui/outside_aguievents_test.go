package agui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
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
