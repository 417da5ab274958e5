package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/lambdatest"
	"github.com/funduq/funduq-go/internal/nodejs"
)

// A run's stream cut at the Lambda deadline while the run goes on, as the
// official AG-UI client sees it (e2e/deadline.mjs, HttpAgent through the
// Lambda entry). HttpAgent ignores SSE comments and ids, and resolves
// runAgent when the body ends, so with the comment alone the application
// saw a run that ended as if complete, its reply cut short, and had
// nowhere to read the run or the Last-Event-ID from. The stream's last
// event is now a CUSTOM funduq.stream_ended naming them and the resume
// (neither RUN_FINISHED nor RUN_ERROR: the run is neither), read through
// the client's onCustomEvent; the resume, made through the client's own
// reconnect seat (connectAgent), reaches RUN_FINISHED with the reply
// whole (design.md §The doors, "A stream's time is up").
func TestOutsideAGUIClientSeesAStreamCutAtTheLambdaDeadline(t *testing.T) {
	t.Run("between messages", func(t *testing.T) { aguiCutAtDeadline(t, "between") })
	// Cut inside a message or tool call, the resume used to open with the
	// message's next TEXT_MESSAGE_CONTENT (TOOL_CALL_ARGS), which the
	// client's fresh verifier refused ("No active text message found with
	// ID 'a1'"); it now sends their openings again, without ids, first: the
	// agent that kept its state ends with the message whole, once, and a
	// fresh one with the part after the cut, as documented, or the whole
	// from 0 (design.md §The doors, "A resume from inside a message").
	t.Run("mid-message", func(t *testing.T) { aguiCutAtDeadline(t, "message") })
	t.Run("mid-tool-call", func(t *testing.T) { aguiCutAtDeadline(t, "tool") })
}

// aguiCutAtDeadline runs deadline.mjs with the agent's reply cut at the
// invocation's end inside its message (cut "message"), inside a tool call
// ("tool") or after its first message ("between"), the rest of the reply
// (a second message when between) sent once the client asks.
func aguiCutAtDeadline(t *testing.T, cut string) {
	node, dir := nodejs.Project(t, "../e2e", "@ag-ui/client")
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe6, nil)
	p.Register("echo")
	handler := doorOn(t, h)
	// A run's POST is in an invocation near its end (the door ends its
	// stream door.DefaultDeadlineMargin before); the resume (a GET, no
	// body) has time.
	srv := lambdatest.Serve(t, door.WrapAPIGateway(handler, nil), func(body []byte) time.Duration {
		if len(body) > 0 {
			return door.DefaultDeadlineMargin + 2*time.Second
		}
		return time.Minute
	})

	// The agent takes the run up, starts its reply, and keeps working
	// past the invocation's end.
	offered := make(chan [2]string, 1)
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Event(f.RunID, `{"type":"RUN_STARTED","threadId":"`+*f.ThreadID+`","runId":"`+f.RunID+`"}`)
		if cut == "tool" {
			p.Event(f.RunID, `{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"lookup","parentMessageId":"m1"}`)
			p.Event(f.RunID, `{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"q\":"}`)
		} else {
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"before "}`)
		}
		if cut == "between" {
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
		}
		offered <- [2]string{f.RunID, *f.ThreadID}
	}()

	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	js := nodejs.Start(ctx, t, node, dir, "deadline.mjs", "FUNDUQ_DOOR="+srv.URL, "FUNDUQ_PROVIDER="+p.Key, "FUNDUQ_CUT="+cut)
	done := false
	sc := bufio.NewScanner(js.Stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "DONE":
			done = true
		case line == "REQ finish":
			ids := <-offered
			switch cut {
			case "tool":
				p.Event(ids[0], `{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"\"x\"}"}`)
				p.Event(ids[0], `{"type":"TOOL_CALL_END","toolCallId":"c1"}`)
			case "between":
				p.Event(ids[0], `{"type":"TEXT_MESSAGE_START","messageId":"a2","role":"assistant"}`)
				p.Event(ids[0], `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a2","delta":"after"}`)
				p.Event(ids[0], `{"type":"TEXT_MESSAGE_END","messageId":"a2"}`)
			default:
				p.Event(ids[0], `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"after"}`)
				p.Event(ids[0], `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
			}
			fin, _ := json.Marshal(map[string]string{"type": "RUN_FINISHED", "threadId": ids[1], "runId": ids[0]})
			p.Event(ids[0], string(fin))
			p.Finish(ids[0])
			ends := run.Completed
			if cut == "tool" {
				// Its tool call is left to the caller: the run finished
				// asking and waits (seed 001, design.md D1).
				ends = run.InputRequired
			}
			h.WaitStatus(ids[0], ends)
			if _, err := io.WriteString(js.Stdin, "OK\n"); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(line, "REQ "):
			t.Fatalf("unknown step %q", line)
		default:
			t.Logf("node: %s", line)
		}
	}
	if err := js.Cmd.Wait(); err != nil || !done {
		t.Fatalf("node deadline.mjs: %v (done %v)\n%s", err, done, js.Stderr.String())
	}
}
