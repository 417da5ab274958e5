package a2a_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// A provider refuses a run in funduq's own words: the A2A caller's failed
// task says those words and no more — not funduq's sentence for the
// reason it collides with, which would tell the caller funduq restarted
// (seeds: funduq invents no reason of its own, the annotation is the
// provider's).
func TestOutsideRefusalInFunduqsWords(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	restart := string(run.ReasonOrphanedByRestart)
	task := taskResult(t, "", c.call("message/send", map[string]any{
		"message": c.message("m1", "hi", nil), "configuration": map[string]any{"blocking": false}}))
	f := p.Offer()
	if task["id"] != f.RunID {
		t.Fatalf("task %v, offered %s", task["id"], f.RunID)
	}
	p.Refuse(f.RunID, restart)
	var got map[string]any
	eventually(t, "the task fails", func() bool {
		got = c.ok("tasks/get", map[string]any{"id": f.RunID})
		return stateOf(got) == "failed"
	})
	if msg := statusText(got); msg != restart {
		t.Fatalf("the failed task says %q, want the provider's words %q", msg, restart)
	}
}
