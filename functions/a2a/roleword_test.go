package a2a_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A role A2A does not have is refused naming the role that came. Found
// from Node: @a2a-js/sdk 1.x, handed a 0.3 message ({"role":"user"}),
// sends "role":"UNRECOGNIZED", and the refusal's "must be \"user\" or
// \"agent\"" read as if "user" itself had been refused.
func TestRefusedRoleIsNamed(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	for _, version := range []string{"", "1.0"} {
		c := newClient(t, srv, p.Key, "echo", version)
		method := "message/send"
		if version == "1.0" {
			method = "SendMessage"
		}
		r := c.code(a2a.CodeInvalidParams, method, map[string]any{"message": c.message("r-1", "x", map[string]any{"role": "UNRECOGNIZED"})})
		if !strings.Contains(r.Error.Message, `"UNRECOGNIZED"`) {
			t.Errorf("A2A %q: refusal %q does not name the role sent", version, r.Error.Message)
		}
	}
	if n := count(t, h, "runs"); n != 0 {
		t.Fatalf("%d runs written", n)
	}
}
