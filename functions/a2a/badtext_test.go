package a2a_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// An id or text holding a NUL character, which PostgreSQL's text cannot
// store, is the caller's bad input: -32602 naming it, not -32603
// "internal error" (outside test F3).
func TestNULTextIsInvalidParams(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	for _, call := range []struct {
		name, method string
		params       any
	}{
		{"tasks/get", "tasks/get", map[string]any{"id": "a\u0000b"}},
		{"tasks/cancel", "tasks/cancel", map[string]any{"id": "a\u0000b"}},
		{"message/send messageId", "message/send", map[string]any{"message": map[string]any{
			"kind": "message", "role": "user", "messageId": "q\u0000", "parts": []any{map[string]any{"kind": "text", "text": "hi"}}}}},
	} {
		t.Run(call.name, func(t *testing.T) {
			r := c.rawCall(c.body(call.method, call.params), nil)
			if r.Error == nil || r.Error.Code != a2a.CodeInvalidParams || !strings.Contains(r.Error.Message, "NUL") {
				t.Fatalf("got %+v %v, want -32602 naming the NUL", r.Error, r.Result)
			}
		})
	}
}
