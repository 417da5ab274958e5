package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// The hazard of keeping a resend read before register for the link's
// register (design.md D7, "A resend read before register"): the run
// paused, the caller's answer reopened it, and the old link, still
// alive, accepted its new round. A raw provider then resends the old
// paused round (its events under the same seqs, and its finish) on a new
// link of the key before its register, the old link not yet seen gone.
// The register replaces the old link and the run passes to the new one;
// taken then, the stale round would answer the caller's answer and pause
// the run again on the old question. It is refused, typed, and the new
// round is the provider's to run.
func TestStaleRoundKeptForRegisterDoesNotAnswerTheAnswer(t *testing.T) {
	h, a, id, thread := echoRunAccepted(t, 0xea)
	started, paused := pauseRawRound(h, a, id, thread)
	answeredOnTheOldLink(t, h, a, id)
	a.Barrier() // claimed by a for the new round; a is then cut
	b := h.Connect(0xea, nil)
	b.SendRaw(started)
	b.SendRaw(paused)
	b.Finish(id)
	got := append(b.ReadBarrier(), registerSeeing(b, "echo")...) // replaces a
	a.Close()
	h.Eventually("the old link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	got = append(got, b.Barrier()...)
	h.Settle()
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("the answered run is %s with %s stored: want it running its new round; the new link was told %q",
			r.Status, storedTypes(h, id), got)
	}
	for _, e := range refusals(t, b, got, 3) {
		if e.RunID != id || !strings.Contains(e.Message, "repeats an earlier round") {
			t.Fatalf("error %+v, want a refusal of the stale round naming run %s", e, id)
		}
	}
	// The new round, numbered from 1 again, is the link's own: its
	// RUN_STARTED is the same text under the same seq as the old one's.
	b.SendRaw(started)
	b.SendRaw(fmt.Sprintf(`{"type":"event","runId":%q,"seq":2,"event":{"type":"RUN_FINISHED","threadId":%q,"runId":%q}}`, id, thread, id))
	b.Finish(id)
	if rest := b.Barrier(); len(rest) > 0 {
		t.Fatalf("the new round was refused: %s", rest[0])
	}
	h.WaitStatus(id, run.Completed)
	if n := len(h.Events(id)); n != 4 {
		t.Fatalf("stored %s, want each round once", storedTypes(h, id))
	}
}

// A resend kept for its link's register, the register not passing the
// run to that link: the link registers another agent, and the old link,
// which still serves the run's agent, keeps the run. The kept reports are
// then answered, typed, as they would have been when read (D15), and a
// query behind them is answered after them.
func TestKeptResendRefusedWhenTheRegisterDoesNotPassTheRun(t *testing.T) {
	h, a, id, thread := echoRunAccepted(t, 0xeb)
	a.Barrier() // claimed by a
	b := h.Connect(0xeb, nil)
	b.SendRaw(eventFrame(id, 1, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)))
	b.Finish(id)
	got := append(b.ReadBarrier(), registerSeeing(b, "other")...)
	got = append(got, b.Barrier()...)
	for _, e := range refusals(t, b, got, 2) {
		if e.RunID != id || !strings.Contains(e.Message, "held by another link") {
			t.Fatalf("error %+v, want %q naming run %s", e, "held by another link", id)
		}
	}
	completedOnTheOldLink(t, h, a, id, thread)
}

// A resend kept for its link's register, the link closing first: what it
// kept goes with it, and the run stays with the link that holds it.
func TestKeptResendGoesWithItsLink(t *testing.T) {
	h, a, id, thread := echoRunAccepted(t, 0xec)
	a.Barrier() // claimed by a
	b := h.Connect(0xec, nil)
	b.SendRaw(eventFrame(id, 1, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)))
	b.ReadBarrier()
	b.Goodbye()
	h.Eventually("the new link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	h.Settle()
	completedOnTheOldLink(t, h, a, id, thread)
}

// The new round of a reopened run, its first events lost with the old
// link and resent before the new link's register, is kept and taken as
// the round's own: the round repeats the old one's RUN_STARTED under the
// same seq (each round is numbered from 1), but an event the earlier
// round did not store tells it from a stale resend.
func TestNewRoundKeptForRegisterIsTakenAfterAnAnswer(t *testing.T) {
	h, a, id, thread := echoRunAccepted(t, 0xed)
	started, _ := pauseRawRound(h, a, id, thread)
	answeredOnTheOldLink(t, h, a, id)
	a.Barrier() // claimed by a for the new round; what a sends next is lost
	b := h.Connect(0xed, nil)
	b.SendRaw(started)
	b.SendRaw(fmt.Sprintf(`{"type":"event","runId":%q,"seq":2,"event":{"type":"CUSTOM","name":"answered","value":1}}`, id))
	got := append(b.ReadBarrier(), registerSeeing(b, "echo")...) // replaces a
	a.Close()
	h.Eventually("the old link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	b.SendRaw(fmt.Sprintf(`{"type":"event","runId":%q,"seq":3,"event":{"type":"RUN_FINISHED","threadId":%q,"runId":%q}}`, id, thread, id))
	b.Finish(id)
	got = append(got, b.Barrier()...)
	if len(got) > 0 {
		t.Fatalf("the new round was refused: %s", got[0])
	}
	h.WaitStatus(id, run.Completed)
	if s := storedTypes(h, id); s != "RUN_STARTED RUN_FINISHED RUN_STARTED CUSTOM RUN_FINISHED" {
		t.Fatalf("stored %s, want each round once, whole", s)
	}
}

// echoRunAccepted starts a node that keeps a lost link's runs for 5 s,
// connects a provider of key seed serving "echo", and has it accept a run
// the door starts on a new thread.
func echoRunAccepted(t *testing.T, seed byte) (h *nodetest.Harness, a *nodetest.Prov, id, thread string) {
	t.Helper()
	h = nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	a = h.Connect(seed, nil)
	a.Register("echo")
	id, thread = h.Door(a.Key, "echo", "", "q")
	a.Offer()
	a.Accept(id)
	return h, a, id, thread
}

// answeredOnTheOldLink reopens paused run id as its caller's answer does,
// and has a, the link that ran the paused round and still alive, accept
// the answered round.
func answeredOnTheOldLink(t *testing.T, h *nodetest.Harness, a *nodetest.Prov, id string) {
	t.Helper()
	if _, err := h.Store.ReopenRun(t.Context(), store.Reopen{RunID: id}); err != nil {
		t.Fatal(err)
	}
	h.Taken(id)
	a.Offer()
	a.Accept(id)
}

// completedOnTheOldLink fails t unless run id is still running with
// nothing stored, and then has a, the old link holding it, complete it.
func completedOnTheOldLink(t *testing.T, h *nodetest.Harness, a *nodetest.Prov, id, thread string) {
	t.Helper()
	if r := h.Run(id); r.Status != run.Running || len(h.Events(id)) != 0 {
		t.Fatalf("run is %s with %s stored, want it running on the old link with nothing stored", r.Status, storedTypes(h, id))
	}
	a.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
}
