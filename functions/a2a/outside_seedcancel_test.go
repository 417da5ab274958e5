package a2a_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
)

// Seed 004, "Offering a run": a cancel arriving while an offer is out
// queues behind the answer. When no answer comes (deliver_timeout) the
// run is nobody's, so the cancel ends it there: cancelled, never offered
// again, and the provider's late ack is answered with a refusal, not
// taken (D15).
func TestOutsideCancelDuringAnUnansweredOffer(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	task := c.send(c.message("u-1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id := task["id"].(string)
	f := p.Offer()
	got := c.ok("tasks/cancel", map[string]any{"id": id})
	if stateOf(got) != "submitted" || !marker(got) {
		t.Fatalf("cancel answer %v", got)
	}
	h.Settle()
	if st := h.Run(id).Status; st.Terminal() {
		t.Fatalf("decided before the offer was answered: %s", st)
	}
	h.Advance(h.Cfg.DeliverTimeout)
	h.WaitStatus(id, run.Cancelled)
	p.Accept(f.RunID) // too late: the run ended
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.RunID != id {
		t.Fatalf("late ack answered %+v", e)
	}
	p.None()
	if g := c.ok("tasks/get", map[string]any{"id": id}); stateOf(g) != "canceled" || marker(g) {
		t.Fatalf("task after the lapse: %v", g)
	}
	if q := h.Quality(p.Key); q.Unanswered != 1 {
		t.Fatalf("quality %+v, want one unanswered", q)
	}
}

// Seed 004: a cancel during an offer, the offer's link lost without a
// close frame. The run is nobody's (D5 hands the offer back), so the
// cancel ends it; the provider re-attaching and acking the run it may
// have taken is told the run has ended, and is offered nothing. (The ack
// the lost link may have carried is not waited for: funduq decides
// without it, where seed 004 would ask a provider that took the run to
// stop. The provider is told, by the refusal, and nothing contradicts the
// recorded end; this pins today's answer.)
func TestOutsideCancelDuringAnOfferWhoseLinkIsLost(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	task := c.send(c.message("l-1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id := task["id"].(string)
	p.Offer()
	c.ok("tasks/cancel", map[string]any{"id": id})
	p.Close()
	h.WaitStatus(id, run.Cancelled)
	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	p2.Accept(id)
	var e wire.Error
	p2.Expect(wire.TypeError, &e)
	if e.RunID != id {
		t.Fatalf("ack after the cancel answered %+v", e)
	}
	p2.None()
	if st := h.Run(id).Status; st != run.Cancelled {
		t.Fatalf("status %s", st)
	}
}

// Seed 004: "The one immediate cancellation is a run still queued". A
// run queued behind a full provider (it declared room for one, and holds
// one) is cancelled without the provider hearing of it: no offer, no
// cancel frame, then or when its room comes back.
func TestOutsideCancelQueuedBehindAFullProvider(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	first := c.send(c.message("f-1", "one", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	f := p.Offer()
	p.Accept(f.RunID)
	h.WaitStatus(f.RunID, run.Running)
	second := c.send(c.message("f-2", "two", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id := second["id"].(string)
	h.Taken(id)
	got := c.ok("tasks/cancel", map[string]any{"id": id})
	if stateOf(got) != "submitted" || !marker(got) {
		t.Fatalf("cancel answer %v", got)
	}
	h.WaitStatus(id, run.Cancelled)
	p.None()
	p.Complete(f.RunID, *f.ThreadID)
	h.WaitStatus(first["id"].(string), run.Completed)
	p.None()
	// Asked again, an ended task is refused, not humoured.
	c.code(a2a.CodeTaskNotCancelable, "tasks/cancel", map[string]any{"id": id})
}

// Seed 004: a cancel asked again of a run already cancelling answers as
// the first did (working, the request pending) and sends the provider
// nothing more; a different caller (anyone may stop an unbound run)
// likewise.
func TestOutsideCancelAskedAgainAndByAnotherCaller(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	other := newClient(t, srv, p.Key, "echo", "1.0")
	task := c.send(c.message("a-1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id := task["id"].(string)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	h.WaitStatus(id, run.Running)
	c.ok("tasks/cancel", map[string]any{"id": id})
	p.Expect(wire.TypeCancel, nil)
	h.WaitStatus(id, run.Cancelling)
	if g := c.ok("tasks/cancel", map[string]any{"id": id}); stateOf(g) != "working" || !marker(g) {
		t.Fatalf("second cancel %v", g)
	}
	if g := other.ok("CancelTask", map[string]any{"id": id}); stateOf(g) != "TASK_STATE_WORKING" || !marker(g) {
		t.Fatalf("another caller's cancel %v", g)
	}
	p.None()
	p.Finish(f.RunID)
	h.WaitStatus(id, run.Cancelled)
}

// Seed 004: "The authority check runs before the refusal". A stranger
// asking to cancel a bound task paused on a question learns no more than
// an unknown id tells; the head, with its proof, is told the task is not
// cancelable because it waits for input.
func TestOutsideStrangerCancelOfAPausedBoundTask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("ask")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "ask", "")
	head, stranger := signer(t, 0xc1), signer(t, 0xc9)
	go func() { pause(p, p.Offer()) }()
	body := c.body("message/send", map[string]any{"message": c.message("p-1", "may I?", nil),
		"metadata": map[string]any{"actorChain": chainOf(t, head)}})
	r := c.rawCall(body, map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(head, time.Now().Unix(), []byte(body))})
	if r.Error != nil || stateOf(r.Result) != "input-required" {
		t.Fatalf("bound pause: %+v %v", r.Error, r.Result)
	}
	id := r.Result["id"].(string)
	proof := func(s *identity.Signer, runID string) map[string]any {
		now := time.Now().Unix()
		return map[string]any{"cancel": map[string]any{"publicKey": s.PublicKeyHex(), "timestamp": now,
			"signature": s.Sign(identity.CancelPayload(runID, now))}}
	}
	const unknown = "run_00000000000000000000000000"
	u := c.code(a2a.CodeTaskNotFound, "tasks/cancel", map[string]any{"id": unknown, "metadata": proof(stranger, unknown)})
	s := c.code(a2a.CodeTaskNotFound, "tasks/cancel", map[string]any{"id": id, "metadata": proof(stranger, id)})
	if len(s.Error.Data) != len(u.Error.Data) {
		t.Fatalf("stranger's refusal %+v, unknown id's %+v", s.Error, u.Error)
	}
	hr := c.code(a2a.CodeTaskNotCancelable, "tasks/cancel", map[string]any{"id": id, "metadata": proof(head, id)})
	if hr.Error.Data["state"] != "input-required" {
		t.Fatalf("head's refusal %+v", hr.Error)
	}
	if st := h.Run(id).Status; st != run.InputRequired {
		t.Fatalf("status %s", st)
	}
}

// Seed 001/004: a cancel recorded while no broker node leads (the door
// needs none) is not lost: the next leader reads the queued run back
// with its request and cancels it, never offering it.
func TestOutsideCancelWhileNoNodeLeads(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	h.Shutdown()
	task := c.send(c.message("n-1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id := task["id"].(string)
	got := c.ok("tasks/cancel", map[string]any{"id": id})
	if stateOf(got) != "submitted" || !marker(got) {
		t.Fatalf("cancel answer %v", got)
	}
	h2 := h.Peer("n2")
	h2.Eventually("the peer leads", h2.Ready)
	p2 := h2.Connect(0xe1, nil)
	p2.Register("echo")
	h2.WaitStatus(id, run.Cancelled)
	p2.None()
}

// Seed 004, "What a run's final status is": an event with no type string
// at all is malformed — the run fails with funduq's RUN_ERROR, the only
// one on its record — while a run that reported its own RUN_ERROR fails
// in the provider's words, its RUN_ERROR not doubled.
func TestOutsideUntypedEventAndAProvidersOwnError(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	runErrors := func(id string) []map[string]any {
		var out []map[string]any
		for _, e := range h.Events(id) {
			if e["type"] == "RUN_ERROR" {
				out = append(out, e)
			}
		}
		return out
	}
	for i, bad := range []string{`{"delta":"no type"}`, `{"type":5,"delta":"x"}`} {
		task := c.send(c.message(fmt.Sprintf("m-%d", i), "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
		id := task["id"].(string)
		f := p.Offer()
		p.Accept(id)
		p.Event(id, runStarted(*f.ThreadID, id))
		p.Event(id, bad)
		r := h.WaitStatus(id, run.Failed)
		if r.FailureReason != string(run.ReasonMalformedEvent) || r.FailureByProvider {
			t.Fatalf("%s: failed %q (by provider %v)", bad, r.FailureReason, r.FailureByProvider)
		}
		if errs := runErrors(id); len(errs) != 1 || errs[0]["code"] != string(run.ReasonMalformedEvent) {
			t.Fatalf("%s: RUN_ERRORs %v", bad, errs)
		}
		if g := c.ok("tasks/get", map[string]any{"id": id}); stateOf(g) != "failed" {
			t.Fatalf("%s: task %v", bad, g)
		}
		p.Barrier() // the refusal of the bad event, if any, is read
	}
	task := c.send(c.message("own", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	id := task["id"].(string)
	f := p.Offer()
	p.Accept(id)
	p.Event(id, runStarted(*f.ThreadID, id))
	p.Event(id, `{"type":"RUN_ERROR","message":"the model is down","code":"upstream_down"}`)
	p.Finish(id)
	r := h.WaitStatus(id, run.Failed)
	if !r.FailureByProvider {
		t.Fatalf("failed %q, not in the provider's words", r.FailureReason)
	}
	if errs := runErrors(id); len(errs) != 1 || errs[0]["code"] != "upstream_down" {
		t.Fatalf("RUN_ERRORs %v", errs)
	}
}

// Seed 001, "Topology": a delegation is two runs linked by lineage, and
// cancelling the parent does not cancel the child — the delegating agent
// decides that. The child (a task whose message references the parent)
// keeps running and its provider hears no cancel for it.
func TestOutsideCancellingAParentLeavesItsChild(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	parent := c.send(c.message("par-1", "delegate", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	pid := parent["id"].(string)
	fp := p.Offer()
	p.Accept(pid)
	p.Event(pid, runStarted(*fp.ThreadID, pid))
	h.WaitStatus(pid, run.Running)
	child := c.send(c.message("chi-1", "sub-task", map[string]any{"referenceTaskIds": []string{pid}}),
		map[string]any{"configuration": map[string]any{"blocking": false}})
	cid := child["id"].(string)
	fc := p.Offer()
	if fc.RunID != cid {
		t.Fatalf("offered %s, want the child %s", fc.RunID, cid)
	}
	p.Accept(cid)
	p.Event(cid, runStarted(*fc.ThreadID, cid))
	h.WaitStatus(cid, run.Running)
	c.ok("tasks/cancel", map[string]any{"id": pid})
	var cf wire.Cancel
	p.Expect(wire.TypeCancel, &cf)
	if cf.RunID != pid {
		t.Fatalf("cancel frame for %s, want the parent %s", cf.RunID, pid)
	}
	p.None()
	p.Finish(pid)
	h.WaitStatus(pid, run.Cancelled)
	if st := h.Run(cid).Status; st != run.Running {
		t.Fatalf("the child is %s after its parent's cancel", st)
	}
	if g := c.ok("tasks/get", map[string]any{"id": cid}); stateOf(g) != "working" || marker(g) {
		t.Fatalf("child task %v", g)
	}
	p.Complete(cid, *fc.ThreadID)
	h.WaitStatus(cid, run.Completed)
}
