package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/lambdatest"
	"github.com/funduq/funduq-go/internal/nodejs"
)

// A stream cut at the Lambda deadline, as the official A2A JavaScript
// client sees it (e2e/deadline.mjs, A2A 1.0 and 0.3): the SDK's stream
// call throws, and what it throws carries the door's -32048 stream_ended
// error (its code and data, naming the task, the Last-Event-ID and the
// method to resume with) — not a silent end an application reads as the
// task's end. The resume it names, made with the SDK and that
// Last-Event-ID, streams the rest to the task's final status and the
// task's text is whole (design.md §The doors, "A stream's time is up").
func TestOutsideA2AClientResumesAStreamCutAtTheLambdaDeadline(t *testing.T) {
	node, dir := nodejs.Project(t, "../e2e", "@a2a-js/sdk")
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe5, nil)
	p.Register("echo")
	handler := doorOn(t, h)
	// A stream that opens a task is in an invocation near its end (the
	// door ends it door.DefaultDeadlineMargin before); anything else, the
	// resume included, has time.
	srv := lambdatest.Serve(t, door.WrapAPIGateway(handler, nil), func(body []byte) time.Duration {
		if bytes.Contains(body, []byte(`"method":"SendStreamingMessage"`)) || bytes.Contains(body, []byte(`"method":"message/stream"`)) {
			return door.DefaultDeadlineMargin + 2*time.Second
		}
		return time.Minute
	})

	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	js := nodejs.Start(ctx, t, node, dir, "deadline.mjs", "FUNDUQ_DOOR="+srv.URL, "FUNDUQ_PROVIDER="+p.Key)

	var cur wire.RunFrame
	text := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	steps := map[string]func(arg string){
		"start": func(string) {
			cur = p.Offer()
			p.Accept(cur.RunID)
			p.Event(cur.RunID, `{"type":"RUN_STARTED","threadId":`+text(*cur.ThreadID)+`,"runId":`+text(cur.RunID)+`}`)
			p.Event(cur.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m-`+cur.RunID+`","role":"assistant"}`)
		},
		"delta": func(arg string) {
			p.Event(cur.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-`+cur.RunID+`","delta":`+text(arg)+`}`)
		},
		"finish": func(string) {
			p.Event(cur.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m-`+cur.RunID+`"}`)
			p.Event(cur.RunID, `{"type":"RUN_FINISHED","threadId":`+text(*cur.ThreadID)+`,"runId":`+text(cur.RunID)+`}`)
			p.Finish(cur.RunID)
		},
	}
	done := false
	sc := bufio.NewScanner(js.Stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "DONE" {
			done = true
			continue
		}
		req, ok := strings.CutPrefix(line, "REQ ")
		if !ok {
			t.Logf("node: %s", line)
			continue
		}
		name, arg, _ := strings.Cut(req, " ")
		step := steps[name]
		if step == nil {
			t.Fatalf("unknown step %q", line)
		}
		step(arg)
		if _, err := io.WriteString(js.Stdin, "OK\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := js.Cmd.Wait(); err != nil || !done {
		t.Fatalf("node deadline.mjs: %v (done %v)\n%s", err, done, js.Stderr.String())
	}
}
