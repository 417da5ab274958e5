package a2a_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// configuration.acceptedOutputModes of the wrong shape is the caller's
// mistake, refused -32602 naming it with nothing written, like every other
// configuration member; a list of media types is taken (the door answers in
// text whatever it lists, as A2A lets an agent).
func TestOutsideAcceptedOutputModesOfTheWrongShape(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	for _, modes := range []any{7, "text/plain", []any{1}, map[string]any{}} {
		r := c.call("message/send", map[string]any{"message": c.message("m", "hi", nil),
			"configuration": map[string]any{"blocking": false, "acceptedOutputModes": modes}})
		if r.Error == nil || r.Error.Code != a2a.CodeInvalidParams || !strings.Contains(r.Error.Message, "acceptedOutputModes") {
			t.Fatalf("acceptedOutputModes %v: got %+v %v, want -32602 naming it", modes, r.Error, r.Result)
		}
	}
	if n := count(t, h, "runs"); n != 0 {
		t.Fatalf("%d runs written", n)
	}
	task := c.send(c.message("ok", "hi", nil), map[string]any{
		"configuration": map[string]any{"blocking": false, "acceptedOutputModes": []any{"text/plain"}}})
	if task["id"] == nil {
		t.Fatalf("task %v", task)
	}
}

// A v0.3 message whose kind says it is something else (a task, a status
// update) is not read as a message: -32602 naming params.message.kind,
// nothing written. A message without a kind, as v1.0 and some clients
// send it, is a message.
func TestOutsideMessageOfAnotherKindIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	for _, kind := range []any{"task", "status-update", 7} {
		r := c.call("message/send", map[string]any{"message": c.message("m", "hi", map[string]any{"kind": kind}),
			"configuration": map[string]any{"blocking": false}})
		if r.Error == nil || r.Error.Code != a2a.CodeInvalidParams || !strings.Contains(r.Error.Message, "params.message.kind") {
			t.Fatalf("kind %v: got %+v %v, want -32602 naming it", kind, r.Error, r.Result)
		}
	}
	if n := count(t, h, "runs"); n != 0 {
		t.Fatalf("%d runs written", n)
	}
	msg := c.message("no-kind", "hi", nil)
	delete(msg, "kind")
	if task := c.send(msg, map[string]any{"configuration": map[string]any{"blocking": false}}); task["id"] == nil {
		t.Fatalf("task %v", task)
	}
}
