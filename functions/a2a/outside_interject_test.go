package a2a_test

// Outside probes of interjections (design.md D4, §The doors): a raw-wire
// provider, callers at the A2A door.

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A caller whose interjection was taken but whose answer was lost sends
// it again, as any retry (D13, D17). By then the task it addressed may
// have ended — an interjection is often what ends it. The retry is the
// same request: it gets the task the first send made, never a refusal
// saying the target is not running, which would tell the caller its
// message was not taken when it was (and was answered).
func TestRetriedInterjectionAfterItsTargetEnded(t *testing.T) {
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "echo", TakesInterjections: true}}})
			p.Expect(wire.TypeRegistered, nil)
			c := newClient(t, startDoor(t, h, nil), p.Key, "echo", v)
			cfg := map[string]any{"blocking": false}
			if v == "1.0" {
				cfg = map[string]any{"returnImmediately": true}
			}
			task := c.send(c.message("j-1", "long job", nil), map[string]any{"configuration": cfg})
			f := p.Offer()
			p.Accept(f.RunID)
			h.WaitStatus(f.RunID, run.Running)
			ctxID := task["contextId"].(string)

			params := map[string]any{"message": c.message("j-2", "stop, that's enough", map[string]any{"contextId": ctxID}),
				"metadata": map[string]any{a2a.AddressedRunIDKey: f.RunID}, "configuration": cfg}
			inter := c.send(params["message"].(map[string]any), map[string]any{"metadata": params["metadata"], "configuration": cfg})
			f2 := p.Offer()
			if f2.RunID != inter["id"] {
				t.Fatalf("offered %s, want the interjection %v", f2.RunID, inter["id"])
			}
			p.Accept(f2.RunID)
			p.Complete(f2.RunID, ctxID)
			p.Complete(f.RunID, ctxID)
			h.WaitStatus(f.RunID, run.Completed)
			h.WaitStatus(f2.RunID, run.Completed)
			runs := count(t, h, "runs")

			again := c.call(methodOf(v, "message/send"), params)
			if again.Error != nil {
				t.Fatalf("the retried interjection was refused %d %q; it was taken as task %v", again.Error.Code, again.Error.Message, inter["id"])
			}
			if got := taskResult(t, v, again); got["id"] != inter["id"] || stateOf(got) != wireState(v, "completed") {
				t.Fatalf("retry answered task %v %q, want %v completed", got["id"], stateOf(got), inter["id"])
			}
			if count(t, h, "runs") != runs {
				t.Fatal("the retry wrote a run")
			}
		})
	}
}
