package a2a_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
)

// Seed 001, "What a restart keeps and what it fails": a waiting run —
// queued — was never in any process; a new process reads it back and
// "each of those runs waits on the unserved clock (from the moment of
// restart) and is failed no_provider_took_it if nobody comes back for
// it" (design.md D7: "their unserved clock starts at the takeover"). A
// run queued on its unserved clock (its provider said goodbye) when the
// leader goes away is therefore served by the provider coming back to
// the new leader within that clock, with provider_grace at its default;
// with nobody back it fails no_provider_took_it when the clock runs out.
func TestOutsideReadBackRunWaitsTheUnservedClock(t *testing.T) {
	for _, comesBack := range []bool{true, false} {
		t.Run(fmt.Sprint("back=", comesBack), func(t *testing.T) { readBackWaits(t, comesBack) })
	}
}

func readBackWaits(t *testing.T, comesBack bool) {
	a := nodetest.Start(t, func(c *config.Broker) { c.ProviderGrace = 30 * time.Second })
	p := a.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	srv := startDoor(t, a, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	first := c.send(c.message("q-1", "one", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	f := p.Offer()
	p.Accept(f.RunID)
	a.WaitStatus(f.RunID, run.Running)
	second := c.send(c.message("q-2", "two", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id := second["id"].(string)
	a.Taken(id)
	p.Goodbye() // the held run fails; the queued one waits on the unserved clock
	a.WaitStatus(first["id"].(string), run.Failed)
	a.Settle()
	if st := a.Run(id).Status; st != run.Queued {
		t.Fatalf("the waiting run is %s before the takeover", st)
	}
	a.Shutdown()
	b := a.Peer("node-b")
	b.Eventually("b leads", b.Ready)
	b.Settle()
	if r := b.Run(id); r.Status != run.Queued {
		t.Fatalf("read back at the takeover, the waiting run is %s (%s); seed 001: it waits the unserved clock", r.Status, r.FailureReason)
	}
	if !comesBack {
		b.Advance(b.Cfg.UnservedTimeout)
		r := b.WaitStatus(id, run.Failed)
		if r.FailureReason != string(run.ReasonNoProviderTookIt) {
			t.Fatalf("failed %q, want no_provider_took_it", r.FailureReason)
		}
		return
	}
	back := b.Connect(0xe1, nodetest.Limit(1))
	back.Register("echo")
	g := back.Offer()
	if g.RunID != id {
		t.Fatalf("offered %s, want %s", g.RunID, id)
	}
	back.Accept(id)
	back.Complete(id, *g.ThreadID)
	b.WaitStatus(id, run.Completed)
}
