package agui_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/internal/nodejs"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// resumeEverywhere resumes run runID through srvURL at every Last-Event-ID
// from 0 to last with the official AG-UI client (e2e/resumeall.mjs) and
// fails t for each resume the client refused.
func resumeEverywhere(t *testing.T, srvURL, runID string, last int) {
	t.Helper()
	node, dir := nodejs.Project(t, "e2e", "@ag-ui/client")
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	cmd := exec.CommandContext(ctx, node, "resumeall.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FUNDUQ_DOOR="+srvURL, "FUNDUQ_RUN="+runID, "FUNDUQ_LAST="+strconv.Itoa(last), "NODE_ENV=test")
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node resumeall.mjs: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(stdout.Bytes()))
	for sc.Scan() {
		var rep struct {
			At    int
			Error *string
			Types []string
		}
		if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
			t.Fatalf("report %q: %v", sc.Text(), err)
		}
		n++
		if rep.Error != nil {
			t.Errorf("resumed after %d: the client refused the stream: %s (applied %v)", rep.At, *rep.Error, rep.Types)
		}
	}
	if n != last+1 {
		t.Fatalf("%d resumes reported, want %d:\n%s%s", n, last+1, stdout.String(), stderr.String())
	}
}

// The official client takes a resume at every Last-Event-ID of runs whose
// opens nest (a tool call inside a message inside a step, reasoning inside
// a step, a subagent's step), including one exactly at a closing event
// and at RUN_FINISHED (nothing open), and of a paused run answered, whose
// second round starts with its own RUN_STARTED (design.md §The doors, "A
// resume from inside a message").
func TestOutsideAGUIClientResumesAtEverySeq(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, srv := echoServed(t, h)
	t.Run("nested", func(t *testing.T) {
		s, f := takenRun(t, p, srv)
		evs := []string{
			runStartedFor(f),
			`{"type":"STEP_STARTED","stepName":"plan"}`,
			`{"type":"REASONING_START","messageId":"r1"}`,
			`{"type":"REASONING_MESSAGE_START","messageId":"r1m","role":"reasoning"}`,
			`{"type":"REASONING_MESSAGE_CONTENT","messageId":"r1m","delta":"hmm"}`,
			`{"type":"REASONING_MESSAGE_END","messageId":"r1m"}`,
			`{"type":"REASONING_END","messageId":"r1"}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"looking"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"f","parentMessageId":"a1"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"q\":"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"1}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":" done"}`,
			`{"type":"TEXT_MESSAGE_END","messageId":"a1"}`,
			`{"type":"STEP_FINISHED","stepName":"plan"}`,
			`{"type":"STEP_STARTED","stepName":"act"}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"a2","role":"assistant"}`,
			`{"type":"TEXT_MESSAGE_END","messageId":"a2"}`,
			`{"type":"STEP_FINISHED","stepName":"act"}`,
			fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID),
		}
		for _, ev := range evs {
			p.Event(f.RunID, ev)
		}
		p.Finish(f.RunID)
		s.rest()
		// Tool call c1 is left to the caller: the run finished asking
		// (seed 001, design.md §The status machine).
		h.WaitStatus(f.RunID, run.InputRequired)
		resumeEverywhere(t, srv.URL, f.RunID, len(evs))
	})
	t.Run("paused and answered", func(t *testing.T) {
		s, f := takenRun(t, p, srv)
		p.Event(f.RunID, runStartedFor(f))
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"may I?"}`)
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
		p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int1","reason":"approval"}]}}`,
			*f.ThreadID, f.RunID))
		p.Finish(f.RunID)
		s.rest()
		h.WaitStatus(f.RunID, run.InputRequired)
		ans := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), resumeBody(*f.ThreadID, "ans", `[{"interruptId":"int1","status":"resolved"}]`), nil)
		f2 := p.Offer()
		p.Accept(f2.RunID)
		p.Event(f.RunID, runStartedFor(f))
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a2","role":"assistant"}`)
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a2","delta":"done"}`)
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"a2"}`)
		p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
		p.Finish(f.RunID)
		ans.rest()
		h.WaitStatus(f.RunID, run.Completed)
		resumeEverywhere(t, srv.URL, f.RunID, h.Run(f.RunID).LastSeq)
	})
}
