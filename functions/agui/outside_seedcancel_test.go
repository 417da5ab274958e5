package agui_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Seed 004, "AG-UI has no cancel signal": a cancelled run gets no
// terminal event, because AG-UI has none to send. A run cancelled while
// still queued (behind a provider that is full) ends its caller's AG-UI
// stream with nothing said — no RUN_ERROR of funduq's — and a later read
// of its events is as empty; the provider never hears of it.
func TestOutsideQueuedRunCancelledEndsItsStreamSilently(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	srv := startDoor(t, h, nil)
	a2aSrv := startA2A(t, h)
	url := aguiURL(srv, p.Key, "echo")
	first := openStream(t, "POST", url, input("t1", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	h.WaitStatus(f.RunID, run.Running)
	s := openStream(t, "POST", url, input("t2", "r2", ""), nil)
	head, ok := s.next()
	id := strings.TrimPrefix(head.Comment, "funduq run ")
	if !ok || !strings.HasPrefix(id, "run_") {
		t.Fatalf("first frame %+v, want the run id", head)
	}
	h.Taken(id)
	if res, rpcErr := a2aCall(t, a2aSrv, p.Key, "echo", "tasks/cancel", map[string]any{"id": id}); rpcErr != nil || res == nil {
		t.Fatalf("cancel: %v %v", res, rpcErr)
	}
	if got := events(s.rest()); len(got) != 0 {
		t.Fatalf("a queued run's cancel streamed %v", got)
	}
	h.WaitStatus(id, run.Cancelled)
	if evs := h.Events(id); len(evs) != 0 {
		t.Fatalf("a cancelled run's record holds %v", evs)
	}
	resumed := openStream(t, "GET", srv.URL+"/runs/"+id+"/events", "", nil)
	if got := events(resumed.rest()); len(got) != 0 {
		t.Fatalf("a resumed read streamed %v", got)
	}
	p.None()
	p.Complete(f.RunID, *f.ThreadID)
	first.rest()
	p.None()
}
