package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A standby: /readyz is 503 and names the leader; /tickets works; an upgrade
// on /ws/provider is answered 503 with Retry-After and the leader's URL,
// without spending the ticket — which then opens a link on the leader.
func TestStandbyPointsAtTheLeader(t *testing.T) {
	a := nodetest.Start(t, nil)
	b := a.Peer("node-b")
	b.Eventually("b is up as a standby", func() bool {
		resp, err := http.Get(b.URL + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode == 503 && body["role"] == "standby" && body["leader"] == a.URL
	})
	s, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xe1))
	resp, err := http.Post(b.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+s.PublicKeyHex()+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var tr wire.TicketResponse
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("tickets on a standby: %d", resp.StatusCode)
	}
	_, wsResp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(b.URL, "http")+"/ws/provider", nil)
	if err == nil || wsResp == nil || wsResp.StatusCode != 503 || wsResp.Header.Get("Retry-After") == "" {
		t.Fatalf("standby upgrade: err %v resp %+v", err, wsResp)
	}
	var body map[string]any
	_ = json.NewDecoder(wsResp.Body).Decode(&body)
	if e, _ := body["error"].(map[string]any); body["leader"] != a.URL || e["code"] != "not_leader" || e["message"] == "" {
		t.Fatalf("503 body %v, want the error envelope with code not_leader and leader %s", body, a.URL)
	}
	// The ticket is unspent: it opens a link on the leader.
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(a.URL, "http")+"/ws/provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	v, nonce := wire.Version, "c9c9c9c9"
	_ = ws.WriteJSON(wire.Hello{Type: "hello", Version: &v, PublicKey: s.PublicKeyHex(), Ticket: tr.Ticket, Nonce: nonce,
		Proof: s.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce))})
	var w wire.Welcome
	if err := ws.ReadJSON(&w); err != nil || w.Type != "welcome" {
		t.Fatalf("welcome: %+v %v", w, err)
	}
}

// A planned handover (the leader stops): the standby takes the lease and a
// new epoch without waiting for the lease to expire; a run its provider was
// holding is re-adopted when the provider re-attaches and reports for it
// within provider_grace, and completes once, with nothing stored twice; a run
// nobody re-adopts fails orphaned_by_funduq_restart after the grace; a run
// queued during the handover is offered by the new leader.
func TestHandoverKeepsWorkAlive(t *testing.T) {
	grace := func(c *configBroker) { c.ProviderGrace = 30 * time.Second }
	a := nodetest.Start(t, grace)
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nil)
	p.Register("echo")
	kept, keptThread := a.Door(p.Key, "echo", "", "kept")
	p.Offer()
	p.Accept(kept)
	p.Event(kept, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, keptThread, kept))
	lost, _ := a.Door(p.Key, "echo", "", "lost")
	p.Offer()
	p.Accept(lost)
	a.WaitStatus(lost, run.Running)
	a.Eventually("first event stored", func() bool { return len(a.Events(kept)) == 1 })
	before, _ := a.Store.CurrentLeader(context.Background())

	a.Shutdown() // SIGTERM on the leader
	b.Eventually("the standby leads", b.Ready)
	after, _ := b.Store.CurrentLeader(context.Background())
	if after.Epoch <= before.Epoch || after.Holder != "node-b" {
		t.Fatalf("leader %+v after %+v", after, before)
	}
	queued, _ := b.Door(p.Key, "echo", "", "queued during handover")

	p2 := b.Connect(0xe1, nil)
	p2.Register("echo")
	if f := p2.Offer(); f.RunID != queued {
		t.Fatalf("offer %s, want the run queued during the handover", f.RunID)
	}
	// Re-adopt: the provider reports for the run it kept running.
	p2.Event(kept, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p2.Event(kept, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"still here"}`)
	p2.Event(kept, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p2.Event(kept, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, keptThread, kept))
	p2.Finish(kept)
	b.WaitStatus(kept, run.Completed)
	if evs := b.Events(kept); len(evs) != 5 {
		t.Fatalf("kept run has %d events, want 5: %v", len(evs), evs)
	}
	if got := b.Run(lost).Status; got != run.Running {
		t.Fatalf("the unreported run is %s inside the grace", got)
	}
	b.Advance(31 * time.Second)
	r := b.WaitStatus(lost, run.Failed)
	if r.FailureReason != string(run.ReasonOrphanedByRestart) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	evs := b.Events(lost)
	if evs[len(evs)-1]["type"] != "RUN_ERROR" {
		t.Fatalf("orphan has no terminal RUN_ERROR: %v", evs)
	}
	if q := b.Quality(p.Key); q.Abandoned != 0 {
		t.Fatalf("a failover counted abandoned: %+v", q)
	}
}

// An offer out when the leader stops goes back to queued and is offered
// again by the next leader.
func TestOfferOutAtHandoverIsOfferedAgain(t *testing.T) {
	a := nodetest.Start(t, nil)
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nil)
	p.Register("echo")
	id, _ := a.Door(p.Key, "echo", "", "hi")
	p.Offer() // never answered
	a.Shutdown()
	b.Eventually("the standby leads", b.Ready)
	if got := b.Run(id).Status; got != run.Queued {
		t.Fatalf("status %s after takeover, want queued", got)
	}
	p2 := b.Connect(0xe1, nil)
	p2.Register("echo")
	if f := p2.Offer(); f.RunID != id {
		t.Fatalf("offer %s", f.RunID)
	}
}

// A held run whose provider streamed its terminal event before the leader
// died, but whose finish was lost with it, is settled by the next leader from
// what is stored — completed, with no RUN_ERROR added after its RUN_FINISHED.
func TestStoredTerminalEventSettlesAtTakeover(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := a.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	a.Eventually("both events stored", func() bool { return len(a.Events(id)) == 2 })
	a.Shutdown() // the finish never comes
	b.Eventually("b leads", b.Ready)
	b.WaitStatus(id, run.Completed)
	if evs := b.Events(id); len(evs) != 2 || evs[1]["type"] != "RUN_FINISHED" {
		t.Fatalf("events %v", evs)
	}
}
