package node_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

func doorInterjection(t *testing.T, h *nodetest.Harness, key, agent, thread, addressed string) string {
	t.Helper()
	id := run.NewRunID()
	b, err := runinput.Build(runinput.Request{ThreadID: thread, RunID: id, AddressedRunID: addressed,
		Messages: []json.RawMessage{json.RawMessage(`{"id":"x","role":"user","content":"also this"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Store.CreateRun(context.Background(), store.NewRun{RunID: id, ThreadID: thread,
		ProviderKey: key, AgentName: agent, RunInput: b.Bytes, AddressedRunID: b.AddressedRunID}); err != nil {
		t.Fatal(err)
	}
	return id
}

// An interjection addressing the thread's running run goes straight to the
// provider holding it, past a turn waiting in the thread's queue, when the
// agent takes interjections; otherwise it waits its turn like any run.
func TestInterjectionBypassesTheThreadQueue(t *testing.T) {
	for _, takes := range []bool{true, false} {
		t.Run(map[bool]string{true: "takes", false: "does not take"}[takes], func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "echo", TakesInterjections: takes}}})
			p.Expect(wire.TypeRegistered, nil)
			first, thread := h.Door(p.Key, "echo", "", "one")
			p.Offer()
			p.Accept(first)
			h.WaitStatus(first, run.Running)
			second, _ := h.Door(p.Key, "echo", thread, "two")
			if f := p.Offer(); f.RunID != second {
				t.Fatalf("offer %s", f.RunID)
			}
			p.Decline(second) // the second turn waits at the head of the thread
			h.WaitStatus(second, run.Queued)
			inter := doorInterjection(t, h, p.Key, "echo", thread, first)
			h.Taken(inter)
			if !takes {
				p.None()
				return
			}
			f := p.Offer()
			if f.RunID != inter {
				t.Fatalf("offer %s, want the interjection %s", f.RunID, inter)
			}
			var in struct {
				ForwardedProps struct {
					Funduq struct{ AddressedRunID string } `json:"funduq"`
				} `json:"forwardedProps"`
			}
			_ = json.Unmarshal(f.RunInput, &in)
			if in.ForwardedProps.Funduq.AddressedRunID != first {
				t.Fatalf("the provider was not told what it addresses: %s", f.RunInput)
			}
		})
	}
}

// After a takeover, a queued interjection whose target did not survive (its
// provider never re-adopted it within the grace, or there was no grace)
// fails interjection_target_lost, with a terminal RUN_ERROR.
func TestInterjectionTargetLostAtTakeover(t *testing.T) {
	for _, grace := range []time.Duration{30 * time.Second, 0} {
		t.Run("grace "+grace.String(), func(t *testing.T) {
			a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = grace })
			b := a.Peer("node-b")
			p := a.Connect(0xe1, nodetest.Limit(1))
			p.Register("echo")
			target, thread := a.Door(p.Key, "echo", "", "one")
			p.Offer()
			p.Accept(target)
			a.WaitStatus(target, run.Running)
			inter := doorInterjection(t, a, p.Key, "echo", thread, target)
			a.Taken(inter) // waits: the provider's one place is taken
			a.Shutdown()
			b.Eventually("b leads", b.Ready)
			b.Advance(grace + time.Second)
			b.WaitStatus(target, run.Failed)
			r := b.WaitStatus(inter, run.Failed)
			if r.FailureReason != string(run.ReasonInterjectionTargetLost) {
				t.Fatalf("reason %q", r.FailureReason)
			}
			evs := b.Events(inter)
			if len(evs) != 1 || evs[0]["type"] != "RUN_ERROR" || evs[0]["code"] != string(run.ReasonInterjectionTargetLost) {
				t.Fatalf("events %v", evs)
			}
		})
	}
}
