package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// heldReleased asserts the broker keeps no held-run list once every run
// it held has ended (the soak test's Held() check).
func heldReleased(t *testing.T, h *nodetest.Harness) {
	t.Helper()
	h.Settle()
	held := h.Node.Broker.Held()
	if held["lostHeld"] != 0 || held["lostHeld.lanes"] != 0 || held["lanes"] != 0 {
		t.Fatalf("held after every run ended: %v", held)
	}
}

// reattach lets 2 s of the link grace pass, then re-attaches key seed: a
// new link of it registering "echo".
func reattach(h *nodetest.Harness, seed byte) *nodetest.Prov {
	h.Advance(2 * time.Second)
	p := h.Connect(seed, nil)
	p.Register("echo")
	return p
}

// countedOnceAndReleased checks, well past every grace, that key's failed
// run stayed counted abandoned once and the broker holds nothing of it.
func countedOnceAndReleased(t *testing.T, h *nodetest.Harness, key string) {
	t.Helper()
	h.Advance(10 * time.Second)
	h.Settle()
	if q := h.Quality(key); q.Abandoned != 1 {
		t.Fatalf("counted %+v, want abandoned 1", q)
	}
	heldReleased(t, h)
}

// Two runs of one key held across a lost link, on two agents; the key
// re-registers only one agent. The other run's key did not come back for
// it: it fails at the end of the first grace and counts abandoned once;
// the re-registered run carries on to its end, counting nothing more.
func TestReattachOfOneAgentLeavesTheOtherToItsGrace(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe1, nodetest.Limit(2))
	p.Register("echo", "other")
	kept, keptThread := h.Door(p.Key, "echo", "", "kept")
	p.Offer()
	p.Accept(kept)
	left, _ := h.Door(p.Key, "other", "", "left")
	p.Offer()
	p.Accept(left)
	h.WaitStatus(kept, run.Running)
	h.WaitStatus(left, run.Running)
	p.Close() // no close frame
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	h.Advance(2 * time.Second)
	back := h.Connect(0xe1, nodetest.Limit(2))
	back.Register("echo")
	h.Advance(3 * time.Second) // the grace from the drop
	failedHoldingIt(t, h, left, p.Key)
	if r := h.Run(kept); r.Status != run.Running {
		t.Fatalf("re-attached run %s (%s), want running", r.Status, r.FailureReason)
	}
	back.Accept(kept)
	back.Complete(kept, keptThread)
	h.WaitStatus(kept, run.Completed)
	h.Advance(5 * time.Second)
	h.Settle()
	if q := h.Quality(p.Key); q.Abandoned != 1 {
		t.Fatalf("counted %+v, want abandoned 1 (the run left)", q)
	}
	heldReleased(t, h)
}

// The re-attached link is itself lost before it reports; the key comes
// back a second time and reports within the wait its first re-attach
// started: the run carries on and nothing counts. Without a report the
// run fails once that wait ends, counted abandoned once — the second
// lost link, which never held the run, adds nothing.
func TestReattachedLinkLostAgain(t *testing.T) {
	t.Run("reported", func(t *testing.T) {
		h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
		p, id, thread := lostHolding(t, h, 0xe1)
		b1 := reattach(h, 0xe1)
		b1.Close()
		h.Eventually("the re-attached link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
		h.Settle()
		b2 := reattach(h, 0xe1)
		b2.Accept(id)
		b2.Complete(id, thread)
		h.WaitStatus(id, run.Completed)
		h.Advance(10 * time.Second)
		h.Settle()
		nothingCounted(t, h, p.Key, "the provider")
		heldReleased(t, h)
	})
	t.Run("silent", func(t *testing.T) {
		h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
		p, id, _ := lostHolding(t, h, 0xe1)
		b1 := reattach(h, 0xe1)
		b1.Close()
		h.Eventually("the re-attached link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
		h.Settle()
		reattach(h, 0xe1)
		h.Advance(3 * time.Second) // the grace from the first re-attach
		failedHoldingIt(t, h, id, p.Key)
		countedOnceAndReleased(t, h, p.Key)
	})
}

// A re-attached link that says goodbye before it reports never held the
// run: the run waits the rest of its wait, and then fails once, counted
// once.
func TestReattachedLinkGoodbyeBeforeItReports(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p, id, _ := lostHolding(t, h, 0xe1)
	back := reattach(h, 0xe1)
	back.Goodbye()
	h.Eventually("the re-attached link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("run %s (%s) at the re-attached link's goodbye, want running", r.Status, r.FailureReason)
	}
	h.Advance(5 * time.Second)
	failedHoldingIt(t, h, id, p.Key)
	countedOnceAndReleased(t, h, p.Key)
}

// A cancel requested while the run is held is sent to the link that
// re-adopts it after the re-attach; the provider's stream then ends the
// run cancelled, nothing counted.
func TestCancelWhileHeldReachesTheReattachedLink(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p, id, _ := lostHolding(t, h, 0xe1)
	if _, err := h.Store.RequestCancel(context.Background(), id, ""); err != nil {
		t.Fatal(err)
	}
	h.Settle()
	back := reattach(h, 0xe1)
	h.Advance(3 * time.Second)
	back.Accept(id)
	back.Expect("cancel", nil)
	back.Finish(id)
	h.WaitStatus(id, run.Cancelled)
	h.Settle()
	nothingCounted(t, h, p.Key, "the provider")
	heldReleased(t, h)
}

// A re-attached link that declines the held run (no offer is out) is
// refused in words; the run is not its, and fails at the end of the wait
// from the re-attach.
func TestReattachedLinkDeclinesTheHeldRun(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p, id, _ := lostHolding(t, h, 0xe1)
	back := reattach(h, 0xe1)
	back.Decline(id)
	expectRefusal(t, back, id, "ack refused")
	h.Advance(5 * time.Second)
	failedHoldingIt(t, h, id, p.Key)
	heldReleased(t, h)
}

// The re-attached link accepts, then falls silent on a live link: the run
// is its and stays running, as any claimed quiet run (no clock fails a
// quiet run, §Timers); nothing counts past the graces.
func TestReattachedThenSilentStaysRunning(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p, id, thread := lostHolding(t, h, 0xe1)
	back := reattach(h, 0xe1)
	back.Accept(id)
	back.ReadBarrier() // the ack handed on before the clock moves
	h.Settle()
	h.Advance(20 * time.Second)
	h.Settle()
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("run %s (%s), want running", r.Status, r.FailureReason)
	}
	nothingCounted(t, h, p.Key, "the provider")
	back.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	back.Finish(id)
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if q := h.Quality(p.Key); q != (store.Quality{ProviderKey: q.ProviderKey}) {
		t.Fatalf("counted %+v", q)
	}
	heldReleased(t, h)
}

// A newer process of the key registers the agent: the old link, still
// running its run, is replaced and left open. The newer link is then lost
// (no close frame), leaving the agent served by no link, so funduq closes
// the replaced link too (design.md §Two processes of one key), and nobody
// serves the agent when the run learns its holder is gone. funduq closed
// the old link — no goodbye — and the newer one was lost: the key is
// expected back, and the run waits the link grace for it like any lost
// link's run, rather than failing provider_left_holding_it and counting
// abandoned against a provider that left nothing on purpose. The old
// process reconnects without registering and finishes the run.
func TestReplacedLinkWhoseReplacementWasLostHoldsItsRun(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	old := h.Connect(0xe1, nil)
	old.Register("echo")
	id, thread := h.Door(old.Key, "echo", "", "hi")
	old.Offer()
	old.Accept(id)
	old.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("first event stored", func() bool { return len(h.Events(id)) == 1 })
	seen, release := old.HoldCloseReply()
	newer := h.Connect(0xe1, nil)
	newer.Register("echo")
	newer.Close() // lost
	// The old link's close, funduq's as the agent is left unserved.
	<-seen
	h.Eventually("the newer link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	h.Settle()
	release()
	h.Eventually("the old link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("run %s (%s) once its replaced holder closed and its replacement was lost, want running for the link grace",
			r.Status, r.FailureReason)
	}
	nothingCounted(t, h, old.Key, "the provider")
	back := h.Connect(0xe1, nil) // the old process, finishing its run
	back.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	back.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"done"}`)
	back.Event(id, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	back.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	back.Finish(id)
	h.WaitStatus(id, run.Completed)
	h.Settle()
	nothingCounted(t, h, old.Key, "the provider")
	heldReleased(t, h)
}

// A run counted undelivered (its window passed) whose link is then lost,
// re-attached by its key and never reported for, fails
// provider_left_holding_it — but a run contributes at most one of
// abandoned and undelivered (design.md §Counters, seed 002): the key's
// record is undelivered 1 alone, not a second count for the same run.
func TestUndeliveredRunLostAfterwardsCountsOnce(t *testing.T) {
	for _, back := range []bool{false, true} {
		t.Run(fmt.Sprintf("reattach=%v", back), func(t *testing.T) {
			h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			id, _ := h.Door(p.Key, "echo", "", "slow")
			p.Offer()
			p.Accept(id)
			h.WaitStatus(id, run.Running)
			h.Settle()
			h.Advance(1801 * time.Second)
			h.Eventually("undelivered counted", func() bool { return h.Quality(p.Key).Undelivered == 1 })
			p.Close() // no close frame
			h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
			h.Settle()
			if back {
				reattach(h, 0xe1)
				h.Settle()
				h.Advance(5 * time.Second)
			} else {
				h.Advance(5 * time.Second)
			}
			abandoned, undelivered := leftHoldingItCounts(t, h, id, p.Key)
			if abandoned != 0 || undelivered != 1 {
				t.Fatalf("counted abandoned %d, undelivered %d; want undelivered 1 alone: one run, one count", abandoned, undelivered)
			}
		})
	}
}

// The leader fails over while a re-attached run waits for its key's
// report (D7): the next leader holds it for provider_grace like any run
// of the old epoch. The key reporting there re-adopts it and it
// completes, nothing counted; a key that never reports leaves it to fail
// orphaned_by_funduq_restart, which counts nothing either.
func TestTakeoverWhileAReattachedRunWaits(t *testing.T) {
	for _, reports := range []bool{true, false} {
		t.Run(fmt.Sprintf("reports=%v", reports), func(t *testing.T) {
			a := nodetest.Start(t, func(c *configBroker) {
				c.LinkGrace = 5 * time.Second
				c.ProviderGrace = 30 * time.Second
			})
			b := a.Peer("node-b")
			p, id, thread := lostHolding(t, a, 0xe1)
			a.Advance(2 * time.Second)
			back := a.Connect(0xe1, nil)
			back.Register("echo")
			a.Settle()
			a.Shutdown()
			b.Eventually("b leads", b.Ready)
			b.Taken(id)
			b.Advance(5 * time.Second) // past both link graces
			b.Settle()
			if r := b.Run(id); r.Status != run.Running {
				t.Fatalf("run %s (%s) inside provider_grace, want running", r.Status, r.FailureReason)
			}
			again := b.Connect(0xe1, nil)
			again.Register("echo")
			if reports {
				again.Accept(id)
				again.Complete(id, thread)
				b.WaitStatus(id, run.Completed)
			} else {
				b.Advance(30 * time.Second)
				r := b.WaitStatus(id, run.Failed)
				if r.FailureReason != string(run.ReasonOrphanedByRestart) {
					t.Fatalf("failed %q, want orphaned_by_funduq_restart", r.FailureReason)
				}
			}
			b.Settle()
			nothingCounted(t, b, p.Key, "the provider")
			heldReleased(t, b)
		})
	}
}

// leftHoldingItCounts waits for run id to fail provider_left_holding_it,
// stops the node (every lane done: a count it makes is made) and returns
// key's stored abandoned and undelivered counts.
func leftHoldingItCounts(t *testing.T, h *nodetest.Harness, id, key string) (abandoned, undelivered int64) {
	t.Helper()
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("failed %q, want provider_left_holding_it", r.FailureReason)
	}
	h.Settle()
	h.Shutdown()
	if err := h.DB().QueryRow(context.Background(), `SELECT abandoned, undelivered FROM provider_quality WHERE provider_key = $1`,
		key).Scan(&abandoned, &undelivered); err != nil {
		t.Fatal(err)
	}
	return abandoned, undelivered
}
