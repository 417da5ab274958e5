package a2a_test

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A messageId longer than the door keeps (1024 bytes; it is stored to
// recognise a retry) is the caller's mistake: -32602 naming it, nothing
// written; not -32603 "internal error" from an index that cannot hold it.
func TestOutsideMessageIDTooLongIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	b := make([]byte, 4500)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	long := hex.EncodeToString(b)
	r := c.call("message/send", map[string]any{"message": c.message(long, "hi", nil), "configuration": map[string]any{"blocking": false}})
	if r.Error == nil || r.Error.Code != a2a.CodeInvalidParams || !strings.Contains(r.Error.Message, "messageId") {
		t.Fatalf("got %+v %v, want -32602 naming messageId", r.Error, r.Result)
	}
	if n := count(t, h, "runs"); n != 0 {
		t.Fatalf("%d runs written", n)
	}
	if task := c.send(c.message(long[:1024], "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}}); task["id"] == nil {
		t.Fatalf("a messageId at the limit: %v", task)
	}
}
