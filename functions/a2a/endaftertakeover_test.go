package a2a_test

import (
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A provider streamed its RUN_FINISHED, and the leader that stored it went
// away before the finish frame came: the run's end is recorded only by the
// next leader, when it takes over (design.md D7), which can be longer than
// the door's settle wait (a killed leader's lease must lapse first). The
// stream waits for that end — it tells the caller so, and keeps the
// connection alive — and closes with the one final status, never with a
// working status that is not final.
func TestStreamWaitsForAnEndRecordedAfterATakeover(t *testing.T) {
	a := nodetest.Start(t, func(c *config.Broker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe2, nil)
	p.Register("echo")
	srv := startDoor(t, a, func(o *a2a.Options) { o.Tail.SettleWait = 20 * time.Millisecond })
	c := newClient(t, srv, p.Key, "echo", "")
	s := c.stream(c.body("message/stream", map[string]any{"message": c.message("m-1", "hi", nil)}), nil)

	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r1","delta":"hello"}`)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID)) // and no finish frame

	// The barrier: the door says it waits for the end past its settle
	// wait. A stream that gives up instead ends here.
	var last string
	for waiting := false; !waiting; {
		line, err := s.br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before the run's end was recorded (run %s); its last item: %s", a.Run(f.RunID).Status, last)
		}
		switch line = strings.TrimRight(line, "\r\n"); {
		case strings.HasPrefix(line, "data:"):
			last = line
		case strings.HasPrefix(line, ": ") && strings.Contains(line, "waiting for"):
			waiting = true
		}
	}
	if r := a.Run(f.RunID); r.Status != run.Running {
		t.Fatalf("the run before the takeover: %s", r.Status)
	}

	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	b.WaitStatus(f.RunID, run.Completed)
	items := s.rest()
	if len(items) == 0 {
		t.Fatal("the stream ended with no final status")
	}
	for _, it := range items[:len(items)-1] {
		if it.Resp.Result["final"] == true {
			t.Fatalf("a final status before the last item: %v", kinds(items))
		}
	}
	end := items[len(items)-1].Resp.Result
	if end["kind"] != "status-update" || end["final"] != true || stateOf(end) != "completed" {
		t.Fatalf("the stream's last item: %v (items %v)", end, kinds(items))
	}
}

// The same for a blocking message/send: it follows the run until it
// settles or the block budget ends, so an end recorded only at the
// takeover after the stored RUN_FINISHED is its answer — the completed
// task, not a working one returned at the settle wait.
func TestBlockingSendWaitsForAnEndRecordedAfterATakeover(t *testing.T) {
	a := nodetest.Start(t, func(c *config.Broker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe3, nil)
	p.Register("echo")
	srv := startDoor(t, a, func(o *a2a.Options) { o.Tail.SettleWait = time.Millisecond })
	c := newClient(t, srv, p.Key, "echo", "")
	body := c.body("message/send", map[string]any{"message": c.message("m-1", "hi", nil)})
	type answer struct {
		r   rpcResp
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		r, err := c.tryRawCall(body, nil)
		answered <- answer{r, err}
	}()

	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r1","delta":"hello"}`)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID)) // and no finish frame
	a.Eventually("RUN_FINISHED stored", func() bool {
		evs := a.Events(f.RunID)
		return len(evs) > 0 && evs[len(evs)-1]["type"] == "RUN_FINISHED"
	})

	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	b.WaitStatus(f.RunID, run.Completed)
	got := recv(t, answered, "the blocking send's answer")
	if got.err != nil {
		t.Fatalf("the blocking send: %v", got.err)
	}
	r := got.r
	if r.Error != nil {
		t.Fatalf("the blocking send: %+v", r.Error)
	}
	if got := stateOf(r.Result); got != "completed" {
		t.Fatalf("the blocking send answered %q, want completed", got)
	}
}
