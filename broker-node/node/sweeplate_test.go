package node_test

import (
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// heldTimers is the node's clock with its NewTimer (the sweep's timer,
// the only one the broker makes) held while hold is set: the sweep's
// goroutine made its pass and then was not run again until the clock had
// moved, as on a loaded machine.
type heldTimers struct {
	clockwork.Clock
	mu      sync.Mutex
	hold    chan struct{} // closed: let the held call arm its timer
	holding chan struct{} // closed once a call is held
}

func (c *heldTimers) NewTimer(d time.Duration) clockwork.Timer {
	c.mu.Lock()
	hold, holding := c.hold, c.holding
	c.hold, c.holding = nil, nil
	c.mu.Unlock()
	if hold != nil {
		close(holding)
		<-hold
	}
	return c.Clock.NewTimer(d)
}

// The sweep's pass is due a sweep interval after the last one read the
// clock. When the sweep's goroutine made a pass and was put off until the
// clock had moved by more than that, its next pass came an interval
// after it woke, not at once: a run waiting on a lost link's grace was
// failed agent_offline only when the clock moved again, and a test that
// moved it once, past the grace, waited for good —
// TestRunWaitsForALostLinkWithinItsGrace failed so under load ("gave up
// waiting: run … reaches failed").
func TestSweepLookingLateStillEndsTheGrace(t *testing.T) {
	held := &heldTimers{}
	h := nodetest.StartWith(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second }, func(o *node.Options) {
		held.Clock = o.Clock
		o.Clock = held
	})
	p := h.Connect(0xe6, nil)
	p.Register("echo")
	p.Close()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	alone, _ := h.Door(p.Key, "echo", "", "nobody comes")
	takenOrEnded(h, alone)
	if got := h.Run(alone).Status; got != run.Queued {
		t.Fatalf("a run for a lost link's agent is %s inside the link grace", got)
	}

	release, holding := make(chan struct{}), make(chan struct{})
	held.mu.Lock()
	held.hold, held.holding = release, holding
	held.mu.Unlock()
	h.Advance(time.Second) // the sweep's tick: it passes, then waits to re-arm
	select {
	case <-holding:
	case <-time.After(time.Minute): // a hang detector
		t.Fatal("the sweep did not pass at its tick")
	}
	h.Advance(4 * time.Second) // the link grace from the loss
	close(release)
	r := h.WaitStatus(alone, run.Failed)
	if r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q after the link grace, want agent_offline", r.FailureReason)
	}
}
