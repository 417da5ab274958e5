package a2a_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A ListTasks whose params are wrong in more than one member is refused
// the same way every time it is sent, naming the first of them in the
// order the door reads them (contextId, status, pageToken,
// statusTimestampAfter): a caller retrying, or comparing two doors, sees
// one answer. On main the string members were read in a map's order, so
// the same request was refused naming any of the four, a different one
// from call to call.
func TestOutsideListTasksRefusalIsTheSameEveryTime(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "1.0")
	params := map[string]any{"contextId": 1, "status": 2, "pageToken": 3, "statusTimestampAfter": 4}
	seen := map[string]int{}
	for range 16 {
		r := c.code(a2a.CodeInvalidParams, "ListTasks", params)
		seen[r.Error.Message]++
	}
	if len(seen) != 1 || seen["params.contextId must be a string"] != 16 {
		t.Fatalf("one request, refused as %v; want \"params.contextId must be a string\" every time", seen)
	}
	p.None()
}
