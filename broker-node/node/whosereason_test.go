package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// A run its provider failed in funduq's words — a RUN_ERROR coded
// orphaned_by_funduq_restart — was not orphaned by a restart: an
// interjection addressing it, still queued when the leader changes, is
// an ordinary turn on the new leader (seed 001 loses only an interjection
// whose target died with the process), offered to the provider when it
// is back, not failed interjection_target_lost.
func TestInterjectionTargetFailedInFunduqsWordsSurvivesTakeover(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	target, thread := a.Door(p.Key, "echo", "", "one")
	p.Offer()
	p.Accept(target)
	p.Event(target, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, target))
	p.Event(target, `{"type":"RUN_ERROR","message":"the provider's own words","code":"orphaned_by_funduq_restart"}`)
	p.Finish(target)
	if r := a.WaitStatus(target, run.Failed); r.FailureReason != string(run.ReasonOrphanedByRestart) {
		t.Fatalf("target's reason %q", r.FailureReason)
	}
	inter := doorInterjection(t, a, p.Key, "echo", thread, target)
	if f := p.Offer(); f.RunID != inter {
		t.Fatalf("offered %s, want the interjection %s", f.RunID, inter)
	}
	p.Decline(inter) // it waits queued through the takeover
	a.WaitStatus(inter, run.Queued)
	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	p2 := b.Connect(0xe1, nodetest.Limit(1))
	p2.Register("echo")
	r := b.Run(inter)
	b.Eventually("the interjection leaves the queue", func() bool { r = b.Run(inter); return r.Status != run.Queued })
	if r.Status == run.Failed {
		t.Fatalf("the interjection failed %q: its target read as orphaned by a restart", r.FailureReason)
	}
	if f := p2.Offer(); f.RunID != inter {
		t.Fatalf("offered %s, want the interjection %s", f.RunID, inter)
	}
}
