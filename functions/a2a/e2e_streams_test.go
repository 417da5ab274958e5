package a2a_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/nodejs"
)

// The door's streams (message/stream, tasks/resubscribe) and blocking
// message/send as the official A2A JavaScript client sees them, in A2A 1.0
// and 0.3 (e2e/streams.mjs): a fast agent done before the stream opens, a
// slow one whose every event waits for the client to have seen the last,
// a pause answered by a streamed message, a failure, a stream dropped and
// resubscribed mid-run, and strangers resubscribing to a bound task. The
// script checks each stream as a user of the SDK would see it (a Task
// first, each reply's text once, one ending status and it last, v0.3's
// final flag once); this side plays the agent, one step per request of
// the script, so the agent's pace follows the client's.
func TestA2AClientStreams(t *testing.T) {
	node, dir := nodejs.Project(t, "e2e", "@a2a-js/sdk")
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := seatDoor(t, h)
	head, seat, stray := signer(t, 0xc1), signer(t, 0xc2), signer(t, 0xc9)
	hc := newClient(t, srv, p.Key, "echo", "")

	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	js := nodejs.Start(ctx, t, node, dir, "streams.mjs", "FUNDUQ_DOOR="+srv.URL, "FUNDUQ_PROVIDER="+p.Key,
		"FUNDUQ_SEAT="+seat.PublicKeyHex(), "FUNDUQ_STRAY="+stray.PublicKeyHex())

	// The agent's steps, on the run it was last offered.
	var cur wire.RunFrame
	text := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	started := func() {
		p.Event(cur.RunID, runStarted(*cur.ThreadID, cur.RunID))
		p.Event(cur.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m-`+cur.RunID+`","role":"assistant"}`)
	}
	offer := func() {
		cur = p.Offer()
		p.Accept(cur.RunID)
	}
	steps := map[string]func(arg string) string{
		"reply": func(arg string) string { offer(); reply(p, cur, arg); return cur.RunID },
		"start": func(string) string { offer(); started(); return cur.RunID },
		"delta": func(arg string) string {
			p.Event(cur.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-`+cur.RunID+`","delta":`+text(arg)+`}`)
			return ""
		},
		"finish": func(string) string {
			p.Event(cur.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m-`+cur.RunID+`"}`)
			p.Event(cur.RunID, runFinished(*cur.ThreadID, cur.RunID))
			p.Finish(cur.RunID)
			return ""
		},
		"pause": func(arg string) string {
			offer()
			started()
			p.Event(cur.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-`+cur.RunID+`","delta":`+text(arg)+`}`)
			p.Event(cur.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m-`+cur.RunID+`"}`)
			p.Event(cur.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ask-1","reason":"approval","message":%s}]}}`,
				*cur.ThreadID, cur.RunID, text(arg)))
			p.Finish(cur.RunID)
			return cur.RunID
		},
		"fail": func(arg string) string {
			offer()
			started()
			p.Event(cur.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-`+cur.RunID+`","delta":"partial"}`)
			p.Event(cur.RunID, `{"type":"RUN_ERROR","code":"agent_failed","message":`+text(arg)+`}`)
			p.Finish(cur.RunID)
			return cur.RunID
		},
		// The cancel the door relays, then the agent stops.
		"cancelled": func(string) string {
			var cf wire.Cancel
			p.Expect(wire.TypeCancel, &cf)
			if cf.RunID != cur.RunID {
				t.Errorf("cancel frame %+v, want run %s", cf, cur.RunID)
			}
			p.Finish(cur.RunID)
			return ""
		},
		// A running task on a context bound to head (its actor chain).
		"bound": func(string) string {
			body := hc.body("message/send", map[string]any{"message": hc.message("bound-1", "mine", nil),
				"metadata": map[string]any{"actorChain": chainOf(t, head)}, "configuration": map[string]any{"blocking": false}})
			r := hc.rawCall(body, map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(head, time.Now().Unix(), []byte(body))})
			if r.Error != nil {
				t.Errorf("bound send: %+v", r.Error)
				return ""
			}
			start := func() { offer(); p.Event(cur.RunID, runStarted(*cur.ThreadID, cur.RunID)) }
			start()
			h.WaitStatus(cur.RunID, run.Running)
			return cur.RunID
		},
		"unbind": func(string) string {
			p.Event(cur.RunID, runFinished(*cur.ThreadID, cur.RunID))
			p.Finish(cur.RunID)
			h.WaitStatus(cur.RunID, run.Completed)
			return ""
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
		t.Logf("agent step: %s", req)
		name, arg, _ := strings.Cut(req, " ")
		step := steps[name]
		if step == nil {
			t.Fatalf("unknown step %q", line)
		}
		if _, err := io.WriteString(js.Stdin, "OK "+step(arg)+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := js.Cmd.Wait(); err != nil || !done {
		t.Fatalf("node streams.mjs: %v (done %v)\n%s", err, done, js.Stderr.String())
	}
}
