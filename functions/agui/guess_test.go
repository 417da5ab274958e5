package agui_test

import (
	"context"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// A first turn naming a thread id funduq did not mint is taken for
// unknown without a read (the insert checks it): when a thread with that
// id does exist (one written outside the doors), the request is still a
// turn on it, not a new thread.
func TestUnmintedThreadIDThatExistsIsContinued(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe7, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	if _, err := h.Store.Pool().Exec(context.Background(), `INSERT INTO threads (thread_id, provider_key, agent_name)
		VALUES ('imported-thread-1', $1, 'echo')`, p.Key); err != nil {
		t.Fatal(err)
	}
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("imported-thread-1", "client-run-1", ""), nil)
	f := p.Offer()
	if f.ThreadID == nil || *f.ThreadID != "imported-thread-1" {
		t.Fatalf("offered on thread %v, want imported-thread-1", f.ThreadID)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	h.WaitStatus(f.RunID, run.Completed)
	if n := threadCount(t, h); n != 1 {
		t.Fatalf("%d threads, want the one that existed", n)
	}
	// An unknown id still opens a funduq thread of its own.
	s = openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("client-thread-2", "client-run-2", ""), nil)
	f = p.Offer()
	if f.ThreadID == nil || !run.IsMintedID(run.ThreadPrefix, *f.ThreadID) {
		t.Fatalf("offered on thread %v, want one funduq minted", f.ThreadID)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
}
