package provider

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/wire"
)

// A shutdown takes every agent out of service on the link before it drains
// (D18): a deleteAgent for each, in roster order, and the link stays open
// until funduq has answered them. An offer that crossed the deleteAgent on
// the wire is declined behind it: funduq reads the deleteAgent first and
// counts nothing for a decline from a link that no longer serves the agent
// (design.md §Counters), and the caller's run waits for the next process
// serving the agent, where a refusal would fail it for good. The run the
// client was holding still reports its end before the link closes.
func TestShutdownTakesAgentsOutOfServiceBeforeDraining(t *testing.T) {
	f := newFakeFunduq(t)
	f.setHooks(func(f *fakeFunduq) { f.passDeletes = true })
	g := newGates()
	_, stop := startClient(t, baseConfig(t, f, Agent{Name: "a", Handler: g.handler}, Agent{Name: "b", Handler: g.handler}))
	p := f.registeredPeer(t)
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	g.waitStarted(t)

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	var seen []frame
	var deletes []string
	for len(deletes) < 2 {
		fr := p.nextFrame(t)
		seen = append(seen, fr)
		if fr.Type == wire.TypeDeleteAgent {
			deletes = append(deletes, fr.Name)
		}
	}
	if deletes[0] != "a" || deletes[1] != "b" {
		t.Fatalf("deleteAgent for %v, want [a b]", deletes)
	}

	// Unanswered yet, so the link is still up: an offer crossing the
	// deleteAgent is answered, and declined.
	p.send(t, runFrame("r-2", "b", "t-2", "hi"))
	for {
		fr := p.nextFrame(t)
		seen = append(seen, fr)
		if fr.Type == wire.TypeAck && fr.RunID == "r-2" {
			if fr.Accepted == nil || *fr.Accepted || fr.Reason != nil {
				t.Fatalf("the offer during the shutdown was answered %s (reason %v), want a decline", fr, fr.Reason)
			}
			break
		}
	}
	p.send(t, wire.Deleted{Type: wire.TypeDeleted, Name: "a"})
	p.send(t, wire.Error{Type: wire.TypeError, Name: "b", Message: `agent "b" has a conversation behind it and cannot be deleted`})
	for _, raw := range p.closed(t) {
		var fr frame
		_ = json.Unmarshal(raw, &fr)
		seen = append(seen, fr)
	}
	var ended, finished bool
	deleted := map[string]bool{}
	for _, fr := range seen {
		switch {
		case fr.Type == wire.TypeDeleteAgent:
			deleted[fr.Name] = true
		case fr.Type == wire.TypeAck && fr.Accepted != nil && !*fr.Accepted && fr.Reason == nil && fr.RunID != "r-2":
			t.Errorf("the shutdown declined %s", fr.RunID)
		case fr.Type == wire.TypeAck && fr.RunID == "r-2" && !deleted["b"]:
			t.Errorf("the decline of r-2 went before the deleteAgent of b")
		case fr.Type == wire.TypeEvent && fr.RunID == "r-1" && fr.Event["type"] == "RUN_ERROR":
			ended = true
		case fr.Type == wire.TypeFinish && fr.RunID == "r-1":
			finished = true
		}
	}
	if !ended || !finished {
		t.Fatalf("the held run's end was not reported before the link closed: %v", seen)
	}
	select {
	case <-stopped:
	case <-time.After(guard):
		t.Fatal("Run did not return")
	}
}
