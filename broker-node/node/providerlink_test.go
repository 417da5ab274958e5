package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// listing returns GET /agents as the store reads it: key/name → online.
func listing(t *testing.T, h *nodetest.Harness) map[string]store.AgentInfo {
	t.Helper()
	as, err := h.Store.ListAgents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.AgentInfo{}
	for _, a := range as {
		out[a.ProviderKey[:4]+"/"+a.Name] = a
	}
	return out
}

// A provider withdrawn at tolerance while it holds a run: the run finishes
// and reports over the open link (D6) — completed, its events stored, no
// abandoned counted; a register there is refused — and the link is closed
// (1008) once the run has ended, counting nothing either.
func TestWithdrawnProviderFinishesWhatItHolds(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.ProviderQualityTolerance = 2 })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	held, heldThread := h.Door(p.Key, "echo", "", "held")
	p.Offer()
	p.Accept(held)
	h.WaitStatus(held, run.Running)
	p.Event(held, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, heldThread, held))
	d, _ := h.Door(p.Key, "echo", "", "declined")
	for i := range 2 {
		if f := p.Offer(); f.RunID != d {
			t.Fatalf("offer %s, want %s", f.RunID, d)
		}
		p.Decline(d) // unlimited: misdeclared
		h.WaitStatus(d, run.Queued)
		if i == 0 {
			p.Register("echo") // a register is a change: the declined run is offered again
		}
	}
	h.Eventually("withdrawn", func() bool { return h.Quality(p.Key).WithdrawnAt != nil })
	expectWithdrawalNotice(t, p)
	p.SendRaw(`{"type":"register","agents":[{"name":"echo"}]}`)
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if !strings.Contains(e.Message, "reconnect") {
		t.Fatalf("register on a withdrawn link told %q", e.Message)
	}
	p.Event(held, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.Event(held, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"done anyway"}`)
	p.Event(held, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(held, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, heldThread, held))
	p.Finish(held)
	h.WaitStatus(held, run.Completed)
	if n := len(h.Events(held)); n != 5 {
		t.Fatalf("%d events stored, want 5", n)
	}
	expectWithdrawnClose(t, p)
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	if q := h.Quality(p.Key); q.Abandoned != 0 || q.Misdeclared != 2 {
		t.Fatalf("quality %+v: a withdrawn provider finishing its run counted", q)
	}
}

// D18: a provider shutting down takes its agent out of service
// (deleteAgent; refused as a deletion since the agent has history, but out
// of service all the same), finishes what it holds, and says goodbye. It
// is offered nothing after the deleteAgent, declines nothing, and no
// counter moves; its queued run takes the ordinary no-provider road.
func TestShutdownDrainsWithoutCounting(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	held, heldThread := h.Door(p.Key, "echo", "", "held")
	p.Offer()
	p.Accept(held)
	h.WaitStatus(held, run.Running)
	queued, _ := h.Door(p.Key, "echo", "", "queued")
	h.Taken(queued)

	p.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "echo"})
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.Name != "echo" {
		t.Fatalf("error %+v", e)
	}
	p.Complete(held, heldThread)
	h.WaitStatus(held, run.Completed)
	p.None() // its place came back, and still nothing was offered
	if got := h.Run(queued).Status; got != run.Queued {
		t.Fatalf("queued run is %s", got)
	}
	p.Goodbye()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Advance(45 * time.Second) // unserved_timeout
	r := h.WaitStatus(queued, run.Failed)
	if r.FailureReason != string(run.ReasonNoProviderTookIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	nothingCounted(t, h, p.Key, "a draining provider")
}

// query frames: each is answered, the bad ones with what is wrong.
func TestQueryRefusals(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	_, thread, _ := h.CompletedRun(p, "echo", "hi")
	p.SendRaw(`{"type":"query","method":"thread_messages","params":{"threadId":"` + thread + `"}}`)
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if !strings.Contains(e.Message, "queryId") {
		t.Fatalf("error %+v", e)
	}
	for _, tc := range []struct{ params, method, says string }{
		{`{"threadId":"` + thread + `"}`, "frobnicate", "unknown query method"},
		{`{}`, "thread_messages", "threadId"},
		{`{"threadId":"` + thread + `","limit":0}`, "thread_messages", "positive"},
		{`{"threadId":"` + thread + `","limit":-2}`, "thread_messages", "positive"},
		{`{"threadId":"` + thread + `","limit":"3"}`, "thread_messages", ""},
		{`"nope"`, "thread_messages", ""},
	} {
		p.SendRaw(`{"type":"query","queryId":"q","method":"` + tc.method + `","params":` + tc.params + `}`)
		typ, f := p.Next()
		var r wire.QueryResult
		_ = json.Unmarshal(f, &r)
		switch {
		case typ == wire.TypeQueryResult && r.Error != "" && strings.Contains(r.Error, tc.says) && r.Result == nil:
		case typ == wire.TypeError && tc.says == "":
		default:
			t.Errorf("%s %s: answered %s", tc.method, tc.params, f)
		}
	}
	p.Register("echo") // still open
}

// Re-registering with changed cards: the new description, card extra,
// metadata and interjection flag are what GET /agents reads.
func TestReregisterUpdatesTheCard(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.SendRaw(`{"type":"register","agents":[{"name":"echo","description":"old","agentCardExtra":{"skills":[]},"metadata":{"v":1}}]}`)
	p.Expect(wire.TypeRegistered, nil)
	p.SendRaw(`{"type":"register","agents":[{"name":"echo","description":"new","agentCardExtra":{"skills":[{"id":"s"}]},"metadata":{"v":2},"takesInterjections":true}],"providerName":"renamed"}`)
	p.Expect(wire.TypeRegistered, nil)
	a := listing(t, h)[p.Key[:4]+"/echo"]
	if a.Description != "new" || !sameJSON(a.AgentCardExtra, `{"skills":[{"id":"s"}]}`) || !sameJSON(a.Metadata, `{"v":2}`) ||
		!a.TakesInterjections || !a.Online {
		t.Fatalf("card after re-register: %+v", a)
	}
	// And back: a field left out takes its default, the flag included.
	p.SendRaw(`{"type":"register","agents":[{"name":"echo"}]}`)
	p.Expect(wire.TypeRegistered, nil)
	a = listing(t, h)[p.Key[:4]+"/echo"]
	if a.Description != "" || a.TakesInterjections || !sameJSON(a.AgentCardExtra, `{}`) || !sameJSON(a.Metadata, `{}`) {
		t.Fatalf("card after a bare re-register: %+v", a)
	}
}

// sameJSON reports whether got holds the same JSON value as want (the
// store keeps jsonb, which respaces it).
func sameJSON(got []byte, want string) bool {
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

// Re-registering while runs are out: a register that keeps the name (a
// changed card) leaves an offer out standing — the accept claims it — and
// a register that drops a name leaves the run of it this link holds
// running to its end, counting nothing. A run of the dropped name that
// arrives afterwards is not offered to it: nobody serves it (agent_offline).
func TestReregisterWhileRunsAreOut(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo", "gone")
	held, heldThread := h.Door(p.Key, "gone", "", "held")
	p.Offer()
	p.Accept(held)
	h.WaitStatus(held, run.Running)
	offered, offeredThread := h.Door(p.Key, "echo", "", "offered")
	p.Offer()
	p.SendRaw(`{"type":"register","agents":[{"name":"echo","description":"v2"}]}`)
	p.Expect(wire.TypeRegistered, nil)
	p.Accept(offered)
	p.Complete(offered, offeredThread)
	h.WaitStatus(offered, run.Completed)
	p.Complete(held, heldThread)
	h.WaitStatus(held, run.Completed)
	late, _ := h.Door(p.Key, "gone", "", "late")
	if r := h.WaitStatus(late, run.Failed); r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q: the dropped name is unserved", r.FailureReason)
	}
	p.None()
	nothingCounted(t, h, p.Key, "the provider")
}

// deleteAgent while an offer of that agent is out, then an accept (the
// offer crossed the deleteAgent on the wire, and this provider chose to
// run it): the accept is taken and the run completes; nothing counts.
func TestAcceptAfterDeleteAgentIsTaken(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "crossed")
	p.Offer()
	p.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "echo"})
	p.Expect(wire.TypeError, nil) // history: kept, out of service
	p.Accept(id)
	p.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	nothingCounted(t, h, p.Key, "the provider")
}

// Every link the key has open is withdrawn at tolerance, not only the one
// that misbehaved: each is told, and each holding no run is closed at once
// (1008, D6), so a provider that reconnects after a closed link does so; a
// new link is the way back for its names.
func TestWithdrawnKeyWithTwoLinks(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.ProviderQualityTolerance = 1 })
	a := h.Connect(0xe1, nil)
	a.Register("a")
	b := h.Connect(0xe1, nil)
	b.Register("b")
	h.CompletedRun(b, "b", "history")
	id, _ := h.Door(a.Key, "a", "", "declined")
	a.Offer()
	a.Decline(id) // unlimited: misdeclared, at tolerance 1
	h.Eventually("withdrawn", func() bool { return h.Quality(a.Key).WithdrawnAt != nil })
	h.Eventually("nothing served", func() bool { return len(h.Node.Broker.Snapshot().Served) == 0 })
	// Each link is told at the withdrawal, not only at its next register,
	// and then closed.
	for _, p := range []*nodetest.Prov{a, b} {
		expectWithdrawalNotice(t, p)
		expectWithdrawnClose(t, p)
	}
	back := h.Connect(0xe1, nil)
	back.Register("a")
	if f := back.Offer(); f.RunID != id {
		t.Fatalf("offer %s", f.RunID)
	}
}

// A withdrawn key's queued run takes the ordinary no-provider road (D6):
// it waits on the unserved clock from the withdrawal and then fails
// no_provider_took_it with a terminal RUN_ERROR; a run arriving meanwhile
// fails agent_offline. The withdrawn link is offered neither.
func TestWithdrawnKeysQueuedRunTakesTheNoProviderRoad(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.ProviderQualityTolerance = 1 })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, _ := h.Door(p.Key, "echo", "", "declined")
	p.Offer()
	p.Decline(id) // unlimited: misdeclared, at tolerance 1
	h.Eventually("withdrawn", func() bool { return h.Quality(p.Key).WithdrawnAt != nil })
	expectWithdrawalNotice(t, p)
	h.WaitStatus(id, run.Queued)
	late, _ := h.Door(p.Key, "echo", "", "late")
	if r := h.WaitStatus(late, run.Failed); r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	h.Advance(45 * time.Second) // unserved_timeout
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonNoProviderTookIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	if evs := h.Events(id); len(evs) == 0 || evs[len(evs)-1]["type"] != "RUN_ERROR" {
		t.Fatalf("events %v", evs)
	}
	expectWithdrawnClose(t, p) // offered nothing before its close
}

// expectWithdrawalNotice reads p's next frame: the error frame telling a
// link its key was withdrawn (D6), naming no run.
func expectWithdrawalNotice(t *testing.T, p *nodetest.Prov) {
	t.Helper()
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if !strings.Contains(e.Message, "withdrawn") || !strings.Contains(e.Message, "reconnect") || e.RunID != "" {
		t.Fatalf("the withdrawal notice: %+v", e)
	}
}

// expectWithdrawnClose waits for p's link to close, and fails t unless
// nothing more was sent on it and funduq closed it as withdrawn: code 1008,
// the withdrawal's words (D6).
func expectWithdrawnClose(t *testing.T, p *nodetest.Prov) {
	t.Helper()
	if rest := p.Rest(); len(rest) != 0 {
		t.Fatalf("sent before the close: %s", rest)
	}
	_, err := p.Closed()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "withdrawn") {
		t.Fatalf("the withdrawn link closed with %v, want 1008 saying withdrawn", err)
	}
}

// nothingCounted fails t when any quality counter of key moved; what says
// whose behaviour was on trial.
func nothingCounted(t *testing.T, h *nodetest.Harness, key, what string) {
	t.Helper()
	if q := h.Quality(key); q != (store.Quality{ProviderKey: q.ProviderKey}) {
		t.Fatalf("%s: counted %+v", what, q)
	}
}
