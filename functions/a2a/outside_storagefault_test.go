package a2a_test

import (
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A stream whose run's terminal event it relayed, but whose end it cannot
// read because the door's storage went away, ends with a JSON-RPC error
// the caller can act on (storage unavailable: resubscribe later) — not
// silently, which a client reads as the task's end. Once storage is back,
// tasks/get shows the task completed with its reply.
func TestOutsideStreamWhoseEndCannotBeReadSaysSo(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *a2a.Options) {
		o.Tail.SettleWait = 300 * time.Millisecond // the outage outlasts it
		o.Tail.DBCheck = time.Hour                 // the tail reads the live feed alone
	})
	c := newClient(t, srv, p.Key, "echo", "")
	st := c.stream(c.body("message/stream", map[string]any{"message": c.message("m", "hi", nil)}), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"r","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":"one"}`)
	for {
		it, ok := st.next()
		if !ok {
			t.Fatal("the stream ended before the reply")
		}
		if it.Resp.Result["kind"] == "artifact-update" {
			break
		}
	}

	endOutage := h.Outage(nodetest.DoorApp)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	rest := st.rest()
	if len(rest) == 0 {
		t.Fatal("the stream ended after the reply without a final status or an error")
	}
	tail := rest[len(rest)-1]
	final, _ := tail.Resp.Result["final"].(bool)
	if !final && (tail.Resp.Error == nil || tail.Resp.Error.Code != a2a.CodeUnavailable) {
		t.Fatalf("the stream ended with %+v (error %+v), want a final status or error %d", tail.Resp.Result, tail.Resp.Error, a2a.CodeUnavailable)
	}
	endOutage()
	p.Finish(f.RunID)
	h.WaitStatus(f.RunID, run.Completed)
	// The task ended meanwhile: tasks/get reads it (a resubscribe to an
	// ended task is told to).
	got := c.ok("tasks/get", map[string]any{"id": f.RunID})
	if stateOf(got) != "completed" || artifactsOf(got)["r"] != "one" {
		t.Fatalf("tasks/get after the outage: %q %v", stateOf(got), artifactsOf(got))
	}
}
