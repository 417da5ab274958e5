package a2a_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

// Seed 004, read line by line against raw providers that do not behave as
// our SDK does. Each test names the sentence it shows.

// textEvents is one assistant message said in one chunk.
func textEvents(msgID, text string) []string {
	return []string{
		fmt.Sprintf(`{"type":"TEXT_MESSAGE_START","messageId":%q,"role":"assistant"}`, msgID),
		fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":%q,"delta":%q}`, msgID, text),
		fmt.Sprintf(`{"type":"TEXT_MESSAGE_END","messageId":%q}`, msgID),
	}
}

// runErrors is the RUN_ERROR events of a run's record.
func runErrors(h *nodetest.Harness, id string) []map[string]any {
	var out []map[string]any
	for _, e := range h.Events(id) {
		if e["type"] == "RUN_ERROR" {
			out = append(out, e)
		}
	}
	return out
}

// frameTypes reads the type of each frame.
func frameTypes(fs [][]byte) []string {
	var out []string
	for _, f := range fs {
		var v struct {
			Type  string `json:"type"`
			RunID string `json:"runId"`
		}
		_ = json.Unmarshal(f, &v)
		out = append(out, v.Type+":"+v.RunID)
	}
	return out
}

// "A provider that ignores a cancel and finishes is recorded completed,
// because RUN_FINISHED is tried before cancel_requested" and "funduq keeps
// relaying whatever the run emits". The provider hears the cancel and
// goes on talking: the streaming caller gets what it says after the
// cancel, and the stream's final status is completed — never canceled,
// and without the pending marker, since nothing is being cancelled any
// more. Asked again, the ended task is not cancelable.
func TestOutsideCancelIgnoredEndsCompletedForTheCaller(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	s := c.stream(c.body("message/stream", map[string]any{"message": c.message("ig-1", "start", nil)}), nil)
	f := p.Offer()
	begin(p, f)
	h.WaitStatus(f.RunID, run.Running)
	if g := c.ok("tasks/cancel", map[string]any{"id": f.RunID}); stateOf(g) != "working" || !marker(g) {
		t.Fatalf("cancel answer %v", g)
	}
	p.Expect(wire.TypeCancel, nil)
	h.WaitStatus(f.RunID, run.Cancelling)
	for _, ev := range textEvents("m-after", "said after the cancel") {
		p.Event(f.RunID, ev)
	}
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	items := normItems(t, "", s.rest())
	last := items[len(items)-1]
	if last.kind != "status-update" || stateOf(last.obj) != "completed" || last.obj["final"] != true {
		t.Fatalf("stream ended %s %v", last.kind, last.obj)
	}
	if md := metaOf(last.obj); md[a2a.CancelRequestedKey] != nil {
		t.Fatalf("final status still marks a pending cancel: %v", md)
	}
	streamed := false
	for _, it := range items {
		if it.kind == "artifact-update" && strings.Contains(mustJSON(it.obj), "said after the cancel") {
			streamed = true
		}
	}
	if !streamed {
		t.Fatalf("what the provider said after the cancel was not relayed: %v", items)
	}
	h.WaitStatus(f.RunID, run.Completed)
	g := c.ok("tasks/get", map[string]any{"id": f.RunID})
	if stateOf(g) != "completed" || marker(g) {
		t.Fatalf("task after the provider finished: %v", g)
	}
	c.code(a2a.CodeTaskNotCancelable, "tasks/cancel", map[string]any{"id": f.RunID})
	if errs := runErrors(h, f.RunID); len(errs) != 0 {
		t.Fatalf("a completed run has RUN_ERRORs %v", errs)
	}
}

// The funnel's order with a provider that stops by reporting its own
// RUN_ERROR after the cancel: "a cancel had been requested → cancelled"
// comes before "none of the above → failed", and "a run that already
// reported its own is left alone" — the record keeps the provider's one
// RUN_ERROR and funduq adds none; the caller reads canceled.
func TestOutsideCancelAnsweredWithTheProvidersOwnRunError(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	id := c.sendNoWait("re-1", "hi", nil)["id"].(string)
	f := p.Offer()
	begin(p, f)
	h.WaitStatus(id, run.Running)
	cancelHeard(c, p, id)
	p.Event(f.RunID, `{"type":"RUN_ERROR","message":"stopped as asked","code":"stopped"}`)
	p.Finish(f.RunID)
	h.WaitStatus(id, run.Cancelled)
	c.wantTask("task", id, "canceled", false)
	errs := runErrors(h, id)
	if len(errs) != 1 || errs[0]["code"] != "stopped" {
		t.Fatalf("RUN_ERRORs on the record %v, want the provider's one", errs)
	}
}

// A cancel landing after the provider's RUN_FINISHED but before its
// finish frame: the end is still the provider's to report, and when it
// does, RUN_FINISHED outranks the cancel — completed, not cancelled.
func TestOutsideCancelBetweenRunFinishedAndFinish(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	id := c.sendNoWait("rf-1", "hi", nil)["id"].(string)
	f := p.Offer()
	begin(p, f)
	h.WaitStatus(id, run.Running)
	for _, ev := range textEvents("m-1", "done") {
		p.Event(f.RunID, ev)
	}
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	p.ReadBarrier()
	g := c.call("tasks/cancel", map[string]any{"id": id})
	switch {
	case g.Error == nil:
		if s := stateOf(g.Result); s != "working" || !marker(g.Result) {
			t.Fatalf("cancel answer %v", g.Result)
		}
	case g.Error.Code != a2a.CodeTaskNotCancelable:
		t.Fatalf("cancel answer %+v", g.Error)
	}
	p.Finish(f.RunID)
	h.WaitStatus(id, run.Completed)
	if g := c.ok("tasks/get", map[string]any{"id": id}); stateOf(g) != "completed" || marker(g) ||
		!strings.Contains(mustJSON(artifactsOf(g)), "done") {
		t.Fatalf("task %v", g)
	}
	if evs := h.Events(id); evs[len(evs)-1]["type"] != "RUN_FINISHED" {
		t.Fatalf("record ends %v", evs[len(evs)-1])
	}
}

// "A cancel arriving now queues behind the pending answer … If the
// provider took the run it is asked to stop", against a provider that
// acks and then declines: the decline answers no offer (the run is
// claimed) and is refused naming the run; the provider is asked to stop
// once; it then finishes without a single event, which is a stop — the
// task is canceled, and funduq writes nothing on the record for it (a
// cancelled run gets no terminal event).
func TestOutsideCancelDuringOfferThenAckThenDecline(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	id := c.sendNoWait("ad-1", "hi", nil)["id"].(string)
	p.Offer()
	if g := c.ok("tasks/cancel", map[string]any{"id": id}); stateOf(g) != "submitted" || !marker(g) {
		t.Fatalf("cancel answer %v", g)
	}
	p.Accept(id)
	p.Decline(id)
	_, f1 := p.Next()
	_, f2 := p.Next()
	got := frameTypes([][]byte{f1, f2})
	if want := map[string]bool{"cancel:" + id: true, "error:" + id: true}; len(got) != 2 || !want[got[0]] || !want[got[1]] || got[0] == got[1] {
		t.Fatalf("frames %v, want one cancel and one error naming the run", got)
	}
	h.WaitStatus(id, run.Cancelling)
	c.wantTask("task while the provider holds it", id, "working", true)
	p.Finish(id)
	h.WaitStatus(id, run.Cancelled)
	if evs := h.Events(id); len(evs) != 0 {
		t.Fatalf("a run cancelled without events has a record %v", evs)
	}
	p.None()
}

// A cancel queued behind an offer the provider refuses: the refusal is the
// answer, so the run fails with the provider's reason verbatim, as its
// own; the cancel finds it ended and changes nothing ("funduq invents no
// reason of its own").
func TestOutsideCancelDuringOfferThenRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	id := c.sendNoWait("rr-1", "hi", nil)["id"].(string)
	p.Offer()
	c.ok("tasks/cancel", map[string]any{"id": id})
	p.Refuse(id, "this agent has retired")
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != "this agent has retired" {
		t.Fatalf("reason %q", r.FailureReason)
	}
	g := c.ok("tasks/get", map[string]any{"id": id})
	if stateOf(g) != "failed" || marker(g) || !strings.Contains(statusText(g), "this agent has retired") {
		t.Fatalf("task %v", g)
	}
	p.None()
}

// A provider that answers the offer with its whole round — no ack, events
// and RUN_FINISHED then finish — while a cancel waits behind the answer:
// the events claim the run (the late-ack rule), so the provider "took the
// run", and its RUN_FINISHED outranks the cancel: completed.
func TestOutsideCancelDuringOfferAnsweredByAWholeRound(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	id := c.sendNoWait("wr-1", "hi", nil)["id"].(string)
	f := p.Offer()
	c.ok("tasks/cancel", map[string]any{"id": id})
	p.Event(id, runStarted(*f.ThreadID, id))
	for _, ev := range textEvents("m-w", "whole") {
		p.Event(id, ev)
	}
	p.Event(id, runFinished(*f.ThreadID, id))
	p.Finish(id)
	h.WaitStatus(id, run.Completed)
	c.wantTask("task", id, "completed", false)
	onlyFrames(t, p, "cancel:"+id)
}

// "A stranger cannot ask at all, on a thread that named an authority … a
// run on a bound thread takes a signature from the same set an ask on it
// would — its segment head or the agent's own provider". A running bound
// task: a stranger's signed cancel is answered as an unknown task and the
// provider hears nothing; the agent's own provider's signature is a
// cancel like the head's (working, the request pending, the provider
// asked).
func TestOutsideCancelOfARunningBoundTaskByStrangerAndProvider(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	id := c.sendBound(signer(t, 0xc1), "bd-1")
	f := p.Offer()
	begin(p, f)
	h.WaitStatus(id, run.Running)
	proof := func(s *identity.Signer) map[string]any { return cancelProof(s, id, time.Now().Unix()) }
	stranger := signer(t, 0xc9)
	c.code(a2a.CodeTaskNotFound, "tasks/cancel", map[string]any{"id": id, "metadata": proof(stranger)})
	// The stranger's own view of the task is no better.
	sb := c.body("tasks/cancel", map[string]any{"id": id, "metadata": proof(stranger)})
	if rr := c.rawCall(sb, map[string]string{door.ViewHeader: identity.MakeViewHeader(stranger, id, time.Now().Unix())}); rr.Error == nil || rr.Error.Code != a2a.CodeTaskNotFound {
		t.Fatalf("stranger with a view header: %+v", rr)
	}
	p.None()
	if st := h.Run(id).Status; st != run.Running {
		t.Fatalf("status %s after a stranger's cancel", st)
	}
	own := signer(t, 0xe1) // the agent's provider
	if g := c.ok("tasks/cancel", map[string]any{"id": id, "metadata": proof(own)}); stateOf(g) != "working" || !marker(g) {
		t.Fatalf("provider's cancel %v", g)
	}
	p.Expect(wire.TypeCancel, nil)
	p.Finish(f.RunID)
	h.WaitStatus(id, run.Cancelled)
}

// "The one immediate cancellation is a run still queued" and "a thread's
// utterances go over one at a time, in the order they arrived": the head
// of a conversation cancelled while it waits behind a full provider leaves
// the thread's queue with it, so the next utterance is offered when room
// comes back — the cancelled one never is.
func TestOutsideCancelledHeadLetsItsSiblingThrough(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nodetest.Limit(1))
	busy := c.sendNoWait("hs-0", "busy", nil)
	fb := p.Offer()
	p.Accept(fb.RunID)
	h.WaitStatus(busy["id"].(string), run.Running)
	head := c.sendNoWait("hs-1", "first", nil)
	ctxID := head["contextId"].(string)
	next := c.sendNoWait("hs-2", "second", map[string]any{"contextId": ctxID})
	headID, nextID := head["id"].(string), next["id"].(string)
	h.Taken(headID)
	h.Taken(nextID)
	c.ok("tasks/cancel", map[string]any{"id": headID})
	h.WaitStatus(headID, run.Cancelled)
	p.None()
	p.Complete(fb.RunID, *fb.ThreadID)
	if f := p.Offer(); f.RunID != nextID {
		t.Fatalf("offered %s, want the sibling %s", f.RunID, nextID)
	}
	if st := h.Run(nextID).Status; st.Terminal() {
		t.Fatalf("sibling %s", st)
	}
}

// "declined — funduq keeps the run queued and offers again when something
// changes, for as long as the agent has a provider attached. Only an
// agent left unserved past a grace window … has its queued runs given up
// on". A provider that declines and stays attached keeps the run queued
// past that window (the caller reads submitted, not failed), and it is
// offered again when something changes — here, the provider registering
// again (the sweep's nudge, design.md §Timers, asks it again meanwhile).
func TestOutsideDeclinedRunOfAServedAgentOutlivesTheUnservedWindow(t *testing.T) {
	// Every decline of ours counts misdeclared (the provider declared no
	// limit); no tolerance, so the count withdraws nobody here.
	h := nodetest.Start(t, func(c *config.Broker) { c.ProviderQualityTolerance = 0 })
	p, c := echoAgent(t, h, nil)
	id := c.sendNoWait("dw-1", "hi", nil)["id"].(string)
	p.Offer()
	p.Decline(id)
	p.ReadBarrier()
	h.Settle()
	// Past the window the run is still asked, not given up on: the
	// sweep's nudge offers a waiting head again once per unserved window
	// (design.md §Timers), and the provider, still full, declines again.
	h.Advance(2 * h.Cfg.UnservedTimeout)
	if f := p.Offer(); f.RunID != id {
		t.Fatalf("offered %s", f.RunID)
	}
	p.Decline(id)
	p.ReadBarrier()
	h.Settle()
	if st := h.Run(id).Status; st.Terminal() {
		t.Fatalf("declined run of a served agent is %s past the unserved window", st)
	}
	if g := c.ok("tasks/get", map[string]any{"id": id}); stateOf(g) != "submitted" {
		t.Fatalf("task %v", g)
	}
	p.Register("echo")
	f := p.Offer()
	if f.RunID != id {
		t.Fatalf("offered %s", f.RunID)
	}
	p.Accept(id)
	p.Complete(id, *f.ThreadID)
	h.WaitStatus(id, run.Completed)
}

// "cancelling … A2A hears it as working, plus a marker saying the request
// is pending": a caller resubscribing to a task whose provider has been
// asked to stop and has not yet is shown it working with the marker, and
// then the provider's own end (here it stops: canceled).
func TestOutsideResubscribeToACancellingTask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	id := c.sendNoWait("rs-1", "hi", nil)["id"].(string)
	f := p.Offer()
	begin(p, f)
	cancelHeard(c, p, id)
	h.WaitStatus(id, run.Cancelling)
	s := c.stream(c.body("tasks/resubscribe", map[string]any{"id": id}), nil)
	first, ok := s.next()
	if !ok || first.Resp.Error != nil {
		t.Fatalf("resubscribe opened with %+v", first)
	}
	if stateOf(first.Resp.Result) != "working" || !marker(first.Resp.Result) {
		t.Fatalf("resubscribe opened with %v", first.Resp.Result)
	}
	p.Finish(id)
	items := normItems(t, "", s.rest())
	last := items[len(items)-1]
	if last.kind != "status-update" || stateOf(last.obj) != "canceled" || last.obj["final"] != true {
		t.Fatalf("stream ended %s %v", last.kind, last.obj)
	}
}

// "A pause has no deadline of funduq's — it waits until it is answered,
// across restarts included … AG-UI lets the asking provider declare
// Interrupt.expires_at, which funduq stores and relays without acting
// on" (D1; the seed's paused_no_resume names a reaper D1 retires). A
// provider asks with a deadline already past; the clock runs far beyond
// every window funduq has and the leader hands over; the task still waits
// for its answer, the deadline relayed as the provider wrote it, and the
// answer reopens the same run on the new leader.
func TestOutsidePauseWithAPastDeadlineWaitsForItsAnswer(t *testing.T) {
	a := nodetest.Start(t, nil)
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nil)
	p.Register("ask")
	c := newClient(t, startDoor(t, a, nil), p.Key, "ask", "")
	id := c.sendNoWait("pd-1", "may I?", nil)["id"].(string)
	f := p.Offer()
	begin(p, f)
	const deadline = "2001-01-01T00:00:00Z"
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ask-1","reason":"approval","expiresAt":%q}]}}`, *f.ThreadID, id, deadline))
	p.Finish(id)
	a.WaitStatus(id, run.InputRequired)
	a.Advance(a.Cfg.UndeliveredWindow + a.Cfg.UnservedTimeout + 24*time.Hour)
	a.Shutdown()
	b.Eventually("the standby leads", b.Ready)
	b.Advance(b.Cfg.ProviderGrace + b.Cfg.UnservedTimeout + 24*time.Hour)
	g := c.ok("tasks/get", map[string]any{"id": id})
	if stateOf(g) != "input-required" || !strings.Contains(mustJSON(metaOf(g)[a2a.InterruptKey]), deadline) {
		t.Fatalf("task past its provider's deadline %v", g)
	}
	p2 := b.Connect(0xe1, nil)
	p2.Register("ask")
	done := completeOffer(p2)
	answered := c.send(c.message("pd-2", "yes", map[string]any{"taskId": id}), nil)
	if f2 := <-done; f2.RunID != id || answered["id"] != id || stateOf(answered) != "completed" {
		t.Fatalf("answer: task %v, offered %s", answered, f2.RunID)
	}
}

// A provider asked to stop that answers by leaving — a goodbye while it
// holds the run, no finish — has not stopped the run but stopped serving
// while holding it: "a claimed run whose provider stopped serving while
// still holding it (provider_left_holding_it)" is failed with funduq's
// RUN_ERROR and counts abandoned (D18), the cancel notwithstanding —
// cancelled is the funnel's verdict, and this run never reached it.
func TestOutsideCancelAnsweredByLeaving(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	id := c.sendNoWait("lv-1", "hi", nil)["id"].(string)
	f := p.Offer()
	begin(p, f)
	cancelHeard(c, p, id)
	p.Goodbye()
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) || r.FailureByProvider {
		t.Fatalf("failed %q (by provider %v)", r.FailureReason, r.FailureByProvider)
	}
	if errs := runErrors(h, id); len(errs) != 1 || errs[0]["code"] != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("RUN_ERRORs %v", errs)
	}
	c.wantTask("task", id, "failed", false)
	// Counted in its own write after the end (design.md §Counters).
	h.Eventually("abandoned is counted", func() bool { return h.Quality(p.Key).Abandoned == 1 })
}

// A provider that answers an offer, behind which a cancel waits, with its
// end alone — a finish with no events, or its own RUN_ERROR then finish —
// took the run and stopped at once. The cancel had been requested, so the
// funnel says cancelled (before "none of the above → failed"): no
// RUN_ERROR of funduq's on the record, and no cancel frame sent after the
// end is written.
func TestOutsideCancelDuringOfferAnsweredByAnEndAlone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []string
	}{
		{"finish alone", nil},
		{"own error", []string{`{"type":"RUN_ERROR","message":"will not","code":"stopped"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p, c := echoAgent(t, h, nil)
			id := c.sendNoWait("ea-1", "hi", nil)["id"].(string)
			p.Offer()
			c.ok("tasks/cancel", map[string]any{"id": id})
			for _, ev := range tc.events {
				p.Event(id, ev)
			}
			p.Finish(id)
			h.WaitStatus(id, run.Cancelled)
			c.wantTask("task", id, "canceled", false)
			if evs := h.Events(id); len(evs) != len(tc.events) {
				t.Fatalf("record %v, want only the provider's %d events", evs, len(tc.events))
			}
			// A RUN_ERROR read before its finish leaves the run claimed
			// and not yet ended when the cancel behind the offer is read,
			// so the provider may be asked to stop once (it took the run);
			// nothing else reaches it.
			allowed := ""
			if len(tc.events) != 0 {
				allowed = "cancel:" + id
			}
			onlyFrames(t, p, allowed)
		})
	}
}

// "Between the offer leaving and the answer arriving, the run is offering
// … (To A2A it is still submitted — nothing is being worked on yet.) A
// declined offer puts it back to queued". Read from the outside while the
// provider thinks, and after it declines.
func TestOutsideOfferingReadsSubmitted(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.ProviderQualityTolerance = 0 })
	p, c := echoAgent(t, h, nil)
	v1 := newClient(t, startDoor(t, h, nil), p.Key, "echo", "1.0")
	id := c.sendNoWait("of-1", "hi", nil)["id"].(string)
	p.Offer()
	h.WaitStatus(id, run.Offering)
	c.wantTask("offering task", id, "submitted", false)
	if g := v1.ok("GetTask", map[string]any{"id": id}); stateOf(g) != "TASK_STATE_SUBMITTED" {
		t.Fatalf("offering task (1.0) %v", g)
	}
	p.Decline(id)
	h.WaitStatus(id, run.Queued)
	if g := c.ok("tasks/get", map[string]any{"id": id}); stateOf(g) != "submitted" {
		t.Fatalf("declined task %v", g)
	}
}

// "A thread's utterances go over one at a time, in the order they
// arrived" and "the only thing that can say 'this one came first' is that
// its answer came back first": a head whose offer goes unanswered past
// deliver_timeout is back in the queue, still the head — its sibling is
// not offered over it — and once the provider takes the head (late), the
// sibling goes over.
func TestOutsideUnansweredHeadIsNotOvertaken(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.ProviderQualityTolerance = 0 })
	p, c := echoAgent(t, h, nil)
	head := c.sendNoWait("uh-1", "first", nil)
	headID, ctxID := head["id"].(string), head["contextId"].(string)
	f := p.Offer()
	next := c.sendNoWait("uh-2", "second", map[string]any{"contextId": ctxID})
	nextID := next["id"].(string)
	h.Taken(nextID)
	h.Advance(h.Cfg.DeliverTimeout)
	h.WaitStatus(headID, run.Queued)
	onlyFrames(t, p, "run:"+headID) // all it got after the head's offer lapsed
	p.Accept(headID)                // late: the late-ack rule claims it
	h.WaitStatus(headID, run.Running)
	g := p.Offer()
	if g.RunID != nextID {
		t.Fatalf("offered %s, want the sibling %s", g.RunID, nextID)
	}
	p.Accept(nextID)
	p.Complete(headID, *f.ThreadID)
	p.Complete(nextID, *g.ThreadID)
	h.WaitStatus(nextID, run.Completed)
}

// "Silence is not a verdict" with a cancel ignored in silence: a provider
// asked to stop that neither stops nor says anything keeps the run. Past
// the undelivered window it is counted undelivered once — "a count
// against the provider, with the run left entirely alone" — and the task
// still reads working with the request pending; the provider's eventual
// finish is taken as any other (here a stop: cancelled).
func TestOutsideCancelIgnoredInSilenceIsCountedNotSettled(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.ProviderQualityTolerance = 0 })
	p, c := echoAgent(t, h, nil)
	id := c.sendNoWait("si-1", "hi", nil)["id"].(string)
	f := p.Offer()
	begin(p, f)
	cancelHeard(c, p, id)
	h.WaitStatus(id, run.Cancelling)
	for range 3 {
		h.Advance(h.Cfg.UndeliveredWindow)
	}
	h.Eventually("undelivered is counted", func() bool { return h.Quality(p.Key).Undelivered == 1 })
	if st := h.Run(id).Status; st != run.Cancelling {
		t.Fatalf("a silent run is %s", st)
	}
	c.wantTask("task", id, "working", true)
	p.None()
	p.Finish(id)
	h.WaitStatus(id, run.Cancelled)
	if q := h.Quality(p.Key); q.Undelivered != 1 || q.Abandoned != 0 {
		t.Fatalf("quality %+v", q)
	}
}

// D7: a run held across a handover keeps its pending cancel — "a pending
// cancel is sent again" to the provider re-adopting it on the new leader,
// whether the caller asked before the handover (the old leader's frame
// may never have been read) or during provider_grace, while nobody holds
// the run (then it is sent once the provider is back). The task reads
// working with the marker meanwhile, and the provider's stop cancels it.
// With nobody back it is an orphan like any other.
func TestOutsideCancelOfARunHeldAcrossAHandover(t *testing.T) {
	for _, when := range []string{"before", "during the grace", "nobody back"} {
		t.Run(when, func(t *testing.T) {
			a := nodetest.Start(t, func(c *config.Broker) { c.ProviderGrace = 30 * time.Second })
			b := a.Peer("node-b")
			p := a.Connect(0xe1, nil)
			p.Register("echo")
			c := newClient(t, startDoor(t, a, nil), p.Key, "echo", "")
			id := c.sendNoWait("ho-1", "hi", nil)["id"].(string)
			f := p.Offer()
			begin(p, f)
			a.WaitStatus(id, run.Running)
			if when == "before" {
				cancelHeard(c, p, id)
				a.WaitStatus(id, run.Cancelling)
			}
			a.Shutdown()
			b.Eventually("the standby leads", b.Ready)
			if when != "before" {
				if g := c.ok("tasks/cancel", map[string]any{"id": id}); stateOf(g) != "working" || !marker(g) {
					t.Fatalf("cancel answer %v", g)
				}
			}
			c.wantTask("task in the grace", id, "working", true)
			if when == "nobody back" {
				// Never re-adopted, the run does not reach the funnel
				// that a cancel would settle: it fails with funduq's
				// reason and RUN_ERROR, as any orphan (D7).
				b.Advance(b.Cfg.ProviderGrace + time.Second)
				r := b.WaitStatus(id, run.Failed)
				if r.FailureReason != string(run.ReasonOrphanedByRestart) {
					t.Fatalf("reason %q", r.FailureReason)
				}
				if errs := runErrors(b, id); len(errs) != 1 || errs[0]["code"] != string(run.ReasonOrphanedByRestart) {
					t.Fatalf("RUN_ERRORs %v", errs)
				}
				c.wantTask("task", id, "failed", false)
				return
			}
			p2 := b.Connect(0xe1, nil)
			p2.Register("echo")
			p2.Event(id, `{"type":"STEP_STARTED","stepName":"still going"}`)
			var cf wire.Cancel
			p2.Expect(wire.TypeCancel, &cf)
			if cf.RunID != id {
				t.Fatalf("cancel frame %+v", cf)
			}
			b.WaitStatus(id, run.Cancelling)
			p2.None()
			p2.Finish(id)
			b.WaitStatus(id, run.Cancelled)
			c.wantTask("task", id, "canceled", false)
		})
	}
}

// A caller blocked on message/send while another request cancels its task
// is answered once the run settles, with what was observed: canceled,
// whether the task was still queued (the one immediate cancellation, no
// event ever written) or running and its provider stopped without a word.
func TestOutsideBlockingSendAnsweredByTheCancel(t *testing.T) {
	for _, where := range []string{"queued", "running"} {
		t.Run(where, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p, c := echoAgent(t, h, nodetest.Limit(1))
			var busy wire.RunFrame
			if where == "queued" {
				c.sendNoWait("bb-0", "busy", nil)
				busy = p.Offer()
				p.Accept(busy.RunID)
				h.WaitStatus(busy.RunID, run.Running)
			}
			answered := make(chan rpcResp, 1)
			go func() { answered <- c.call("message/send", map[string]any{"message": c.message("bb-1", "hi", nil)}) }()
			var id string
			if where == "queued" {
				h.Eventually("the task is queued", func() bool {
					var n int
					_ = h.Store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM runs WHERE status = 'queued'`).Scan(&n)
					return n == 1
				})
				_ = h.Store.Pool().QueryRow(t.Context(), `SELECT run_id FROM runs WHERE status = 'queued'`).Scan(&id)
				h.Taken(id)
				c.ok("tasks/cancel", map[string]any{"id": id})
			} else {
				f := p.Offer()
				id = f.RunID
				begin(p, f)
				h.WaitStatus(id, run.Running)
				cancelHeard(c, p, id)
				p.Finish(id)
			}
			a := <-answered
			if a.Error != nil {
				t.Fatalf("blocking send: %+v", a.Error)
			}
			got := a.Result
			if got["id"] != id || stateOf(got) != "canceled" || marker(got) {
				t.Fatalf("blocking send answered %v", got)
			}
			if where == "queued" {
				p.None()
				p.Complete(busy.RunID, *busy.ThreadID)
			}
		})
	}
}
