package a2a_test

// Outside probes of pause, answer and cancel together (design.md D1, §The
// status machine): a raw-wire provider, callers at the A2A door.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A provider asked to cancel that pauses instead: the pause outranks the
// cancel (design.md §The status machine), so the task is input-required
// and, like any paused task, not cancelable (D1). Its question is still
// owed an answer: a message naming the task resumes it — the same task,
// the same run offered again, not cancelled by the earlier request — and
// nothing is left waiting forever.
func TestCancelledRunThatPausesIsAnswerable(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    string
		// asked: the question is stored before the cancel is asked, and
		// the provider's finish frame comes after it.
		asked bool
	}{{"v", "", false}, {"v1.0", "1.0", false}, {"asked-first", "", true}} {
		v := tc.v
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			c := newClient(t, startDoor(t, h, nil), p.Key, "echo", v)
			cfg := map[string]any{"blocking": false}
			if v == "1.0" {
				cfg = map[string]any{"returnImmediately": true}
			}
			task := taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message("m1", "start", nil), "configuration": cfg}))
			f := p.Offer()
			id := f.RunID
			if task["id"] != id {
				t.Fatalf("task %v, offered %s", task["id"], id)
			}
			begin(p, f)
			h.WaitStatus(id, run.Running)
			question := fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ok?","reason":"confirm"}]}}`, *f.ThreadID, id)
			if tc.asked {
				p.Event(id, question)
				h.Eventually("the question stored", func() bool { return len(h.Events(id)) == 2 })
			}

			if got := c.ok(methodOf(v, "tasks/cancel"), map[string]any{"id": id}); stateOf(got) != wireState(v, "working") || !marker(got) {
				t.Fatalf("cancel answer %v", got)
			}
			var cf wire.Cancel
			p.Expect(wire.TypeCancel, &cf)
			// The provider asks a question instead of stopping.
			if !tc.asked {
				p.Event(id, question)
			}
			p.Finish(id)
			h.WaitStatus(id, run.InputRequired)
			if got := c.ok(methodOf(v, "tasks/get"), map[string]any{"id": id}); stateOf(got) != wireState(v, "input-required") || marker(got) {
				t.Fatalf("paused after a cancel: %q marker %v", stateOf(got), marker(got))
			}
			c.code(a2a.CodeTaskNotCancelable, methodOf(v, "tasks/cancel"), map[string]any{"id": id})

			got := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
			done := taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message("m2", "yes", map[string]any{"taskId": id})}))
			if done["id"] != id {
				t.Fatalf("the answer made task %v; the paused task %s is left %q", done["id"], id, h.Run(id).Status)
			}
			if f2 := recv(t, got, "the answer offered"); f2.RunID != id {
				t.Fatalf("the answer offered %s, want the paused run %s", f2.RunID, id)
			}
			if stateOf(done) != wireState(v, "completed") || marker(done) {
				t.Fatalf("answered: %q marker %v", stateOf(done), marker(done))
			}
			p.None()
		})
	}
}

// An interjection whose target pauses or ends before it is delivered is an
// ordinary next turn of the context (doors.md §3.6: a target that ends
// first degrades it). Such a target did not die with the leader (seed 001:
// only an interjection "whose target died with the process" is lost; D7
// leaves a paused one untouched), so a takeover does not make the caller's
// message lost either: the new leader offers it when the provider is back.
func TestInterjectionOnAPausedTargetSurvivesTakeover(t *testing.T) {
	interjectionAcrossTakeover(t, pause, run.InputRequired)
}

func TestInterjectionOnAnEndedTargetSurvivesTakeover(t *testing.T) {
	interjectionAcrossTakeover(t, func(p *nodetest.Prov, f wire.RunFrame) { p.Complete(f.RunID, *f.ThreadID) }, run.Completed)
}

// interjectionAcrossTakeover queues an interjection behind its running
// target, lets the target stop (stop, leaving it in status want) so the
// interjection is offered and declined, fails the leader over, and checks
// that the new leader offers the interjection as an ordinary turn.
func interjectionAcrossTakeover(t *testing.T, stop func(*nodetest.Prov, wire.RunFrame), want run.Status) {
	t.Helper()
	a := nodetest.Start(t, func(c *config.Broker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	c := newClient(t, startDoor(t, a, nil), p.Key, "echo", "")
	nonBlocking := map[string]any{"configuration": map[string]any{"blocking": false}}
	target := c.send(c.message("t-1", "long job", nil), nonBlocking)
	f := p.Offer()
	begin(p, f)
	a.WaitStatus(f.RunID, run.Running)
	inter := c.send(c.message("i-1", "also this", map[string]any{"contextId": target["contextId"]}),
		map[string]any{"metadata": map[string]any{a2a.AddressedRunIDKey: f.RunID}, "configuration": map[string]any{"blocking": false}})
	interID := inter["id"].(string)
	a.Taken(interID) // waits: the provider's one place is taken
	stop(p, f)       // the target pauses or ends: its place is free
	a.WaitStatus(f.RunID, want)
	if g := p.Offer(); g.RunID != interID {
		t.Fatalf("offered %s, want the interjection %s", g.RunID, interID)
	}
	p.Decline(interID) // full right now: it waits queued
	a.WaitStatus(interID, run.Queued)

	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	p2 := b.Connect(0xe1, nodetest.Limit(1))
	p2.Register("echo")
	b.Settle()
	if r := b.Run(interID); r.Status.Terminal() {
		t.Fatalf("after the takeover the interjection is %s / %s; its target is %s", r.Status, r.FailureReason, b.Run(f.RunID).Status)
	}
	if g := p2.Offer(); g.RunID != interID {
		t.Fatalf("after the takeover offered %s, want the interjection %s", g.RunID, interID)
	}
	p2.Accept(interID)
	p2.Complete(interID, *f.ThreadID)
	b.WaitStatus(interID, run.Completed)
	if r := b.Run(f.RunID); r.Status != want {
		t.Fatalf("the target after the takeover: %s, want %s", r.Status, want)
	}
}

// A task asked to cancel is still working — the provider holds it and
// funduq relays whatever it emits (seed 004) — so an interjection may
// still address it: the door takes it and the provider holding the task,
// which takes interjections, is offered it straight away.
func TestInterjectionOnACancellingTask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "echo", TakesInterjections: true}}})
	p.Expect(wire.TypeRegistered, nil)
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	nonBlocking := map[string]any{"configuration": map[string]any{"blocking": false}}
	target := c.send(c.message("t-1", "long job", nil), nonBlocking)
	f := p.Offer()
	begin(p, f)
	h.WaitStatus(f.RunID, run.Running)
	cancelHeard(c, p, f.RunID)
	h.WaitStatus(f.RunID, run.Cancelling)
	if got := c.ok("tasks/get", map[string]any{"id": f.RunID}); stateOf(got) != "working" {
		t.Fatalf("the cancelling task reads %q", stateOf(got))
	}

	r := c.call("message/send", map[string]any{"message": c.message("i-1", "also this", map[string]any{"contextId": target["contextId"]}),
		"metadata": map[string]any{a2a.AddressedRunIDKey: f.RunID}, "configuration": map[string]any{"blocking": false}})
	if r.Error != nil {
		t.Fatalf("an interjection addressing the working task: %+v", r.Error)
	}
	if g := p.Offer(); g.RunID != r.Result["id"] {
		t.Fatalf("offered %s, want the interjection %v", g.RunID, r.Result["id"])
	}
}

// A cancel racing the provider's pause: whichever lands first, the caller
// gets a typed answer (working with the marker, or not cancelable once
// paused), the task ends up input-required, and its answer resumes it.
func TestCancelRacingThePause(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	for i := range 4 {
		c.send(c.message(fmt.Sprintf("m-%d", i), "start", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
		f := p.Offer()
		id := f.RunID
		begin(p, f)
		h.WaitStatus(id, run.Running)
		answer := make(chan rpcResp, 1)
		go func() { answer <- c.call("tasks/cancel", map[string]any{"id": id}) }()
		pause(p, f)
		r := recv(t, answer, "the cancel's answer")
		switch {
		case r.Error == nil && stateOf(r.Result) == "working" && marker(r.Result):
		case r.Error != nil && r.Error.Code == a2a.CodeTaskNotCancelable:
		default:
			t.Fatalf("round %d: cancel racing the pause answered %+v %v", i, r.Error, r.Result)
		}
		h.WaitStatus(id, run.InputRequired)
		done := make(chan rpcResp, 1)
		go func() {
			done <- c.call("message/send", map[string]any{"message": c.message(fmt.Sprintf("a-%d", i), "yes", map[string]any{"taskId": id})})
		}()
		// A cancel passed on before the pause landed may reach the provider
		// first; the answer's offer follows it.
		var g wire.RunFrame
		for {
			typ, raw := p.Next()
			if typ == wire.TypeCancel {
				continue
			}
			if typ != wire.TypeRun || json.Unmarshal(raw, &g) != nil {
				t.Fatalf("round %d: frame %s", i, raw)
			}
			break
		}
		if g.RunID != id {
			t.Fatalf("round %d: the answer offered %s, want %s", i, g.RunID, id)
		}
		p.Accept(id)
		p.Complete(id, *f.ThreadID)
		if got := recv(t, done, "the answer"); got.Error != nil || got.Result["id"] != id || stateOf(got.Result) != "completed" {
			t.Fatalf("round %d: answer %+v %v", i, got.Error, got.Result)
		}
	}
	p.None()
}

// A streaming caller whose task is asked to cancel and then pauses: the
// stream ends on one final input-required status, without the pending
// cancel marker (nothing is being cancelled any more), carrying the ask.
func TestStreamOfACancelledRunThatPauses(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	s := c.stream(c.body("message/stream", map[string]any{"message": c.message("m1", "start", nil)}), nil)
	f := p.Offer()
	begin(p, f)
	h.WaitStatus(f.RunID, run.Running)
	cancelHeard(c, p, f.RunID)
	pause(p, f)
	items := normItems(t, "", s.rest())
	last := items[len(items)-1]
	if last.kind != "status-update" || stateOf(last.obj) != "input-required" || last.obj["final"] != true {
		t.Fatalf("stream ended %s %v", last.kind, last.obj)
	}
	if md := metaOf(last.obj); md[a2a.CancelRequestedKey] != nil || !strings.Contains(mustJSON(md[a2a.InterruptKey]), "ask-1") {
		t.Fatalf("final status metadata %v", md)
	}
}
