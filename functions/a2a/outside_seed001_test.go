package a2a_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
)

// funduqProps is forwardedProps.funduq as a provider reads it off its run
// frame (D4).
type funduqProps struct {
	Caller     identity.ChainSummary `json:"caller"`
	ActorChain []string              `json:"actorChain"`
}

func funduqOf(t *testing.T, f wire.RunFrame) funduqProps {
	t.Helper()
	var in struct {
		ForwardedProps struct {
			Funduq funduqProps `json:"funduq"`
		} `json:"forwardedProps"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil {
		t.Fatalf("run input %s: %v", f.RunInput, err)
	}
	return in.ForwardedProps.Funduq
}

// Seed 001, "Core's caller doors are not independently safe": the chain
// reaches the serving provider verbatim, with funduq's dispatch hop naming
// the agent it was offered to; "a hop carries no timestamp and needs none:
// an agent may extend a chain hours after it received the work". So an
// agent that received a bound run extends the chain it was handed with
// its own hop and, long after its own run ended, delegates at another
// funduq door presenting as itself: the child run is accepted, head the
// original caller, presenter the agent, and its provider receives every
// hop as presented plus its own dispatch hop. The extended chain, presented
// by anyone but the signer of its last hop — the stranger who saw it, or
// the head itself — is refused: "the door refuses a chain whose last hop
// it did not authenticate".
func TestOutsideSeed001AgentExtendsItsChainHoursLater(t *testing.T) {
	h := nodetest.Start(t, nil)
	pa := h.Connect(0xe1, nil)
	pa.Register("a")
	pb := h.Connect(0xe2, nil)
	pb.Register("b")
	later := time.Now().Add(5 * time.Hour)
	var now func() time.Time = time.Now
	srv := startDoor(t, h, func(o *a2a.Options) { o.Now = func() time.Time { return now() } })
	ca := newClient(t, srv, pa.Key, "a", "")
	cb := newClient(t, srv, pb.Key, "b", "")
	head, stray := signer(t, 0xc1), signer(t, 0xc9)
	agentA := signer(t, 0xe1)
	funduqKey := signer(t, 0xb6).PublicKeyHex()

	presented := func(c *client, s *identity.Signer, at time.Time, chain []string, msgID string) rpcResp {
		t.Helper()
		body := c.body("message/send", map[string]any{"message": c.message(msgID, "hi", nil),
			"metadata": map[string]any{"actorChain": chain}, "configuration": map[string]any{"blocking": false}})
		return c.rawCall(body, map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(s, at.Unix(), []byte(body))})
	}

	// The caller's run at agent a.
	first := chainOf(t, head)
	if r := presented(ca, head, time.Now(), first, "m-1"); r.Error != nil {
		t.Fatalf("the caller's own chain: %+v", r.Error)
	}
	fa := pa.Offer()
	got := funduqOf(t, fa)
	if len(got.ActorChain) != 2 || got.ActorChain[0] != first[0] {
		t.Fatalf("agent a received the chain %q; want the caller's hop verbatim and funduq's dispatch hop", got.ActorChain)
	}
	received, err := identity.VerifyChain(got.ActorChain)
	if err != nil {
		t.Fatalf("the chain agent a received does not verify: %v", err)
	}
	d := received.Hops[1]
	if d.ActorKey != funduqKey || d.DispatchedTo == nil || *d.DispatchedTo != (identity.DispatchTarget{ProviderKey: pa.Key, Name: "a"}) {
		t.Fatalf("funduq's dispatch hop %+v; want one signed by funduq naming %s/a", d, pa.Key)
	}
	if got.Caller != (identity.ChainSummary{HeadKey: head.PublicKeyHex(), PresenterKey: head.PublicKeyHex(), Hops: 1}) {
		t.Fatalf("caller %+v", got.Caller)
	}
	pa.Accept(fa.RunID)
	pa.Complete(fa.RunID, *fa.ThreadID)
	h.WaitStatus(fa.RunID, run.Completed)

	// Hours later, agent a delegates to b under the caller's head.
	hop, err := identity.SignHop(agentA, &received.Hops[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	extended := append(slices.Clone(got.ActorChain), hop.Token)
	now = func() time.Time { return later }
	for _, who := range []struct {
		name string
		s    *identity.Signer
	}{{"a stranger who saw the chain", stray}, {"the head itself", head}} {
		r := presented(cb, who.s, later, extended, "m-"+who.name)
		if r.Error == nil || r.Status != 401 || r.Error.Data["reason"] != "invalid_chain" {
			t.Fatalf("%s presenting agent a's chain: %d %+v %v", who.name, r.Status, r.Error, r.Result)
		}
	}
	if r := presented(cb, agentA, later, extended, "m-2"); r.Error != nil {
		t.Fatalf("agent a presenting the chain it extended, hours later: %+v", r.Error)
	}
	fb := pb.Offer()
	child := funduqOf(t, fb)
	if child.Caller != (identity.ChainSummary{HeadKey: head.PublicKeyHex(), PresenterKey: pa.Key, Hops: 3}) {
		t.Fatalf("the child's caller %+v; want head the caller, presenter agent a, 3 hops", child.Caller)
	}
	if len(child.ActorChain) != 4 || !slices.Equal(child.ActorChain[:3], extended) {
		t.Fatalf("agent b received %q; want the 3 hops as presented and a dispatch hop", child.ActorChain)
	}
	c, err := identity.VerifyChain(child.ActorChain)
	if err != nil {
		t.Fatalf("the child's chain does not verify: %v", err)
	}
	if dt := c.Hops[3].DispatchedTo; c.Hops[3].ActorKey != funduqKey || dt == nil || dt.ProviderKey != pb.Key || dt.Name != "b" {
		t.Fatalf("the child's dispatch hop %+v", c.Hops[3])
	}
	// "Its as-presented form is on the run's record."
	var recorded []string
	if err := json.Unmarshal(h.Run(fb.RunID).ActorChain, &recorded); err != nil || len(recorded) < 3 || !slices.Equal(recorded[:3], extended) {
		t.Fatalf("the child run's record holds the chain %q (%v)", recorded, err)
	}
	// No run for the refused presentations: the one offered is the one accepted.
	pb.Accept(fb.RunID)
	pb.Complete(fb.RunID, *fb.ThreadID)
	h.WaitStatus(fb.RunID, run.Completed)
	pb.None()
	if n := count(t, h, "runs"); n != 2 {
		t.Fatalf("%d runs recorded; want the caller's and the delegation's", n)
	}
}

// Seed 001, "What a restart keeps and what it fails": "A new process reads
// every queued row back at start ... Providers connect after start, so each
// of those runs waits on the unserved clock (from the moment of restart)";
// D8: "While no leader holds the lease, runs simply wait in queued, and
// the next leader treats them as rows read back at start". A task sent
// while no node leads, for an agent whose provider had left before, is
// such a row: the next leader does not fail it agent_offline, and the
// provider connecting after that leader started is offered it.
func TestOutsideSeed001RunQueuedWhileNobodyLeadsWaitsForItsProvider(t *testing.T) {
	a := nodetest.Start(t, nil)
	p := a.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, a, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	p.Goodbye()
	a.Settle()
	a.Shutdown()
	task := c.sendNoWait("nl-1", "while nobody leads", nil)
	id := task["id"].(string)
	if st := stateOf(task); st != "submitted" {
		t.Fatalf("sent while nobody leads, the task reads %s", st)
	}
	b := a.Peer("node-b")
	b.Eventually("b leads", b.Ready)
	b.Settle()
	if r := b.Run(id); r.Status != run.Queued {
		t.Fatalf("read back by the next leader, the run is %s (%s); seed 001/D8: it waits the unserved clock", r.Status, r.FailureReason)
	}
	back := b.Connect(0xe1, nil)
	back.Register("echo")
	f := back.Offer()
	if f.RunID != id {
		t.Fatalf("offered %s, want %s", f.RunID, id)
	}
	back.Accept(id)
	back.Complete(id, *f.ThreadID)
	b.WaitStatus(id, run.Completed)
	if g := c.ok("tasks/get", map[string]any{"id": id}); stateOf(g) != "completed" {
		t.Fatalf("task %v", g)
	}
}

// Seed 001, "Finish asking": a round that ends RUN_FINISHED with a tool
// call nobody answered has finished asking, as one with an interrupt
// outcome has (D1: input-required, answered by a message naming the
// task). The caller's stream ends input-required, tasks/get reads it so
// with the open call, and the answer reopens the same task.
func TestOutsideSeed001UnansweredToolCallPausesTheTask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	st := c.stream(c.body("message/stream", map[string]any{"message": c.message("tc-1", "pick a colour", nil)}), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TOOL_CALL_START","toolCallId":"tc1","toolCallName":"pick_color"}`)
	p.Event(f.RunID, `{"type":"TOOL_CALL_END","toolCallId":"tc1"}`)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	ks := kinds(st.rest())
	if len(ks) == 0 || ks[len(ks)-1] != "status-update:input-required" {
		t.Fatalf("the stream %v; want it to end input-required", ks)
	}
	g := c.ok("tasks/get", map[string]any{"id": f.RunID})
	meta, _ := g["metadata"].(map[string]any)
	if stateOf(g) != "input-required" || fmt.Sprint(meta[a2a.OutstandingAsksKey]) != "[tc1]" {
		t.Fatalf("tasks/get %v", g)
	}
	task := c.sendNoWait("tc-2", "blue", map[string]any{"taskId": f.RunID})
	if task["id"] != f.RunID {
		t.Fatalf("the answer made task %v, want %s reopened", task["id"], f.RunID)
	}
	if f2 := p.Offer(); f2.RunID != f.RunID {
		t.Fatalf("offered %s, want %s", f2.RunID, f.RunID)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	h.WaitStatus(f.RunID, run.Completed)
}
