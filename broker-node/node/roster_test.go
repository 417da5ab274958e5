package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
)

// "registered" is written before any run for the newly registered names,
// even when runs are already waiting for them.
func TestRegisteredBeforeAnyRun(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 1 << 40 })
	first := h.Connect(0xe1, nil)
	first.Register("echo")
	first.Close()
	h.Eventually("unserved", func() bool { return len(h.Node.Broker.Snapshot().Served) == 0 })
	id, _ := h.Door(first.Key, "echo", "", "hi") // within provider_grace of takeover: it waits
	h.Taken(id)
	p := h.Connect(0xe1, nil)
	p.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "echo"}}})
	p.Expect(wire.TypeRegistered, nil)
	if f := p.Offer(); f.RunID != id {
		t.Fatalf("offer %s", f.RunID)
	}
}

// A later link with the same key replaces the earlier for the names it
// registers; tearing the earlier one down never takes down its replacement.
func TestReplacedLinkTeardownKeepsReplacement(t *testing.T) {
	h := nodetest.Start(t, nil)
	old := h.Connect(0xe1, nil)
	old.Register("echo", "other")
	repl := h.Connect(0xe1, nil)
	repl.Register("echo")
	old.Close()
	h.Eventually("old link detached", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	served := h.Node.Broker.Snapshot().Served
	if len(served) != 1 || served[0].Name != "echo" {
		t.Fatalf("served %v, want only echo on the replacement", served)
	}
	id, _ := h.Door(repl.Key, "echo", "", "hi")
	if f := repl.Offer(); f.RunID != id {
		t.Fatalf("offer %s", f.RunID)
	}
	// The old link's names go offline in the listing just after it leaves
	// the roster (Detach writes them once the link is forgotten): wait for
	// the listing GET /agents shows. echo never goes offline for good.
	h.Eventually("listing says echo online, other offline", func() bool {
		agents, err := h.Store.ListAgents(context.Background())
		if err != nil {
			return false
		}
		online := map[string]bool{}
		for _, a := range agents {
			online[a.Name] = a.Online
		}
		return online["echo"] && !online["other"]
	})
}

// Re-registering replaces the link's roster: omitted names go offline,
// their records stay.
func TestReregisterReplacesRoster(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("a", "b")
	p.Register("b")
	// "registered" is written before the roster changes (so it precedes
	// any run for the names): wait for the change itself.
	h.Eventually("only b served", func() bool {
		served := h.Node.Broker.Snapshot().Served
		return len(served) == 1 && served[0].Name == "b"
	})
	agents, _ := h.Store.ListAgents(context.Background())
	if len(agents) != 2 {
		t.Fatalf("records %v: a's record must stay", agents)
	}
}

// Bad registrations are answered with error frames; the link stays open.
func TestRegisterRefusals(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	for _, tc := range []struct{ frame, says string }{
		{`{"type":"register","agents":[]}`, "at least one agent"},
		{`{"type":"register","agents":[{"name":"bad name"}]}`, "must match"},
		{`{"type":"register","agents":[{"name":"a"},{"name":"a"}]}`, "listed twice"},
		{`{"type":"register","agents":[{"name":"a","colour":"red"}]}`, "colour"},
		{`{"type":"frobnicate"}`, "unexpected frame 'frobnicate'"},
		{`not json`, "unparseable frame"},
		{`{"type":"hello"}`, "unexpected frame 'hello'"},
		{`{"type":"event","runId":"run_x","event":{"type":"RUN_STARTED"}}`, "event refused"},
		{`{"type":"finish","runId":"run_x"}`, "finish refused"},
		{`{"type":"deleteAgent"}`, "deleteAgent needs a name"},
	} {
		p.SendRaw(tc.frame)
		var e wire.Error
		p.Expect(wire.TypeError, &e)
		if !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s: error %q, want %q", tc.frame, e.Message, tc.says)
		}
	}
	p.Register("a") // still open and usable
}

// deleteAgent removes an agent without history and refuses one with history.
func TestDeleteAgent(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("fresh", "used")
	h.CompletedRun(p, "used", "hi")
	p.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "fresh"})
	var d wire.Deleted
	p.Expect(wire.TypeDeleted, &d)
	p.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "used"})
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.Name != "used" || !strings.Contains(e.Message, "conversation") {
		t.Fatalf("error %+v", e)
	}
}

// thread_messages answers the thread's messages for the agent's own key
// only; a stranger gets the same answer as for a missing thread.
func TestThreadMessagesQuery(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	_, thread, _ := h.CompletedRun(p, "echo", "hi")
	p.SendRaw(`{"type":"query","queryId":"q1","method":"thread_messages","params":{"threadId":"` + thread + `","limit":1}}`)
	var r wire.QueryResult
	p.Expect(wire.TypeQueryResult, &r)
	var msgs []map[string]any
	_ = json.Unmarshal(r.Result, &msgs)
	if r.QueryID != "q1" || len(msgs) != 1 || msgs[0]["role"] != "assistant" || msgs[0]["content"] != "hello" {
		t.Fatalf("result %+v %v", r, msgs)
	}
	stranger := h.Connect(0xe2, nil)
	stranger.SendRaw(`{"type":"query","queryId":"q2","method":"thread_messages","params":{"threadId":"` + thread + `"}}`)
	r = wire.QueryResult{}
	stranger.Expect(wire.TypeQueryResult, &r)
	missing := wire.QueryResult{}
	stranger.SendRaw(`{"type":"query","queryId":"q3","method":"thread_messages","params":{"threadId":"thread_nope"}}`)
	stranger.Expect(wire.TypeQueryResult, &missing)
	if r.Error == "" || r.Error != missing.Error || r.Result != nil {
		t.Fatalf("stranger got %+v, missing thread %+v", r, missing)
	}
}

// /livez, /readyz and /metrics.
func TestOperationsSurface(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	h.CompletedRun(p, "echo", "hi")
	for path, want := range map[string][]string{
		"/livez":  {`"alive"`},
		"/readyz": {`"role":"leader"`, `"database":"ok"`, `"redis":"ok"`},
		"/metrics": {"funduq_broker_provider_links 1", `funduq_broker_offers_total{outcome="accepted"} 1`,
			`funduq_broker_runs_ended_total{status="completed"} 1`, "funduq_broker_is_leader 1", "funduq_broker_events_relayed_total 5"},
	} {
		// The run's end is counted just after its status is written.
		var b strings.Builder
		h.Eventually(path+" says "+strings.Join(want, ", "), func() bool {
			resp, err := http.Get(h.URL + path)
			if err != nil {
				return false
			}
			b.Reset()
			_, _ = io_Copy(&b, resp)
			if resp.StatusCode != 200 {
				return false
			}
			for _, w := range want {
				if !strings.Contains(b.String(), w) {
					return false
				}
			}
			return true
		})
	}
}
