package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// lostHolding starts a run of key seed's agent echo, has the provider
// accept it and send RUN_STARTED, then drops its link without a close
// frame. It returns the provider (its link gone), the run and its thread.
func lostHolding(t *testing.T, h *nodetest.Harness, seed byte) (p *nodetest.Prov, id, thread string) {
	t.Helper()
	p = h.Connect(seed, nil)
	p.Register("echo")
	id, thread = h.Door(p.Key, "echo", "", "slow")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("first event stored", func() bool { return len(h.Events(id)) == 1 })
	p.Close() // no close frame
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	return p, id, thread
}

// failedHoldingIt asserts the run failed provider_left_holding_it, its
// caller's stream ending in funduq's RUN_ERROR, and key counted
// abandoned once.
func failedHoldingIt(t *testing.T, h *nodetest.Harness, id, key string) {
	t.Helper()
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) || r.FailureByProvider {
		t.Fatalf("failed %q (by provider %v), want funduq's provider_left_holding_it", r.FailureReason, r.FailureByProvider)
	}
	evs := h.Events(id)
	if last := evs[len(evs)-1]; last["type"] != "RUN_ERROR" || last["code"] != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("the caller's stream ends on %v, want funduq's RUN_ERROR", last)
	}
	h.Eventually("abandoned counted", func() bool { return h.Quality(key).Abandoned == 1 })
	h.Settle()
	if q := h.Quality(key); q != (store.Quality{ProviderKey: q.ProviderKey, Abandoned: 1}) {
		t.Fatalf("counted %+v, want abandoned 1 alone", q)
	}
}

// D5: a link dropped without a close frame and re-attached by the same
// key within the link grace is carried on, not abandoned. The provider
// re-attaches (ticket, handshake, register) inside the grace, and its
// agent is busy: its next report comes only after the grace from the
// drop has passed. The run is still its own — it completes, nothing
// counts. Before, the run needed a report inside the grace: it failed
// provider_left_holding_it and counted abandoned although its key came
// back in time.
func TestReattachWithinTheGraceCarriesOn(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p, id, thread := lostHolding(t, h, 0xe1)
	h.Advance(2 * time.Second) // inside the grace
	back := h.Connect(0xe1, nil)
	back.Register("echo")
	h.Advance(3 * time.Second) // the grace, from the drop
	back.None()
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("run %s (%s) once the grace from the drop passed, want running: its key re-attached in time", r.Status, r.FailureReason)
	}
	back.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	back.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"took a while"}`)
	back.Event(id, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	back.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	back.Finish(id)
	var r store.Run
	h.Eventually("the run ends", func() bool { r = h.Run(id); return r.Status.Terminal() })
	if r.Status != run.Completed {
		t.Fatalf("run %s (%s), want completed", r.Status, r.FailureReason)
	}
	h.Settle()
	nothingCounted(t, h, p.Key, "the provider")
}

// A provider that restarted has forgotten the run, re-attaches within the
// grace and never reports for it. The re-attach carries the run on for one
// more link grace, from the re-attach, for the key's report; none comes,
// so the run fails provider_left_holding_it there (the caller gets funduq's
// RUN_ERROR) and counts abandoned — it is not left running for good.
func TestReattachedRunWithoutAReportFails(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p, id, _ := lostHolding(t, h, 0xe1)
	h.Advance(2 * time.Second) // inside the grace
	back := h.Connect(0xe1, nil)
	back.Register("echo")
	h.Advance(3 * time.Second) // the grace from the drop: carried on
	back.None()
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("run %s (%s) at the end of the grace from the drop, want running", r.Status, r.FailureReason)
	}
	nothingCounted(t, h, p.Key, "the provider within the grace from its re-attach")
	h.Advance(2 * time.Second) // the grace from the re-attach
	failedHoldingIt(t, h, id, p.Key)
	back.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	expectRefusal(t, back, id, "event refused: the run has ended")
}

// A re-attach after the grace comes too late: the run has failed
// provider_left_holding_it at the grace's end, abandoned counted, and the
// key's report for it on the new link is refused.
func TestReattachAfterTheGraceFindsTheRunFailed(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p, id, _ := lostHolding(t, h, 0xe1)
	h.Advance(5 * time.Second)
	failedHoldingIt(t, h, id, p.Key)
	back := h.Connect(0xe1, nil)
	back.Register("echo")
	back.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	expectRefusal(t, back, id, "event refused: the run has ended")
	h.Settle()
	if r := h.Run(id); r.Status != run.Failed {
		t.Fatalf("run %s after a late re-attach, want failed", r.Status)
	}
	if q := h.Quality(p.Key); q.Abandoned != 1 {
		t.Fatalf("counted %+v, want abandoned 1", q)
	}
}

// Only the run's own key re-attaching carries it on: another key
// registering an agent of the same name within the grace saves nothing,
// and its report for the run is refused as a stranger's.
func TestOtherKeyReattachingSavesNothing(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p, id, _ := lostHolding(t, h, 0xe1)
	h.Advance(2 * time.Second)
	other := h.Connect(0xe2, nil)
	other.Register("echo")
	other.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	expectRefusal(t, other, id, "event refused: unknown run")
	h.Advance(3 * time.Second) // the grace, from the drop
	failedHoldingIt(t, h, id, p.Key)
	nothingCounted(t, h, other.Key, "the other key")
}

// A provider that says goodbye (a close frame) while holding a run is
// certain to have left: its run fails at once, with no grace, even when
// the key comes straight back.
func TestGoodbyeFailsHeldRunsAtOnce(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "bye")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	h.WaitStatus(id, run.Running)
	p.Goodbye()
	failedHoldingIt(t, h, id, p.Key) // no clock moved
	back := h.Connect(0xe1, nil)
	back.Register("echo")
	back.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	expectRefusal(t, back, id, "event refused: the run has ended")
}

// A re-attached link may report for the run it holds before it registers
// (a raw provider resending what it owes first): the report re-adopts it.
func TestReportBeforeRegisterReadopts(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "resend")
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	p.Close()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	back := h.Connect(0xe1, nil)
	back.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	back.Register("echo")
	h.Settle()
	nothingCounted(t, h, p.Key, "the provider")
}
