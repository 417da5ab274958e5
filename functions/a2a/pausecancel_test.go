package a2a_test

// Outside probes of pause, answer and cancel together (design.md D1, §The
// status machine): a raw-wire provider, callers at the A2A door.

import (
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
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
			p.Accept(id)
			p.Event(id, runStarted(*f.ThreadID, id))
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
