package node_test

import (
	"encoding/json"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// An offer out to one process of a key (link a, declared 1) answered by
// another process of the key (link b, D15) moves the run to b: a's own
// place is free again, so the run of a's agent waiting for that place is
// offered to a at once — not when the moved run ends, nor at the sweep's
// next nudge (the unserved window, 45 s).
func TestOfferMovedToAnotherLinkFreesTheOfferedLinksPlace(t *testing.T) {
	h := nodetest.Start(t, nil)
	a := h.Connect(0xe1, nodetest.Limit(1))
	a.Register("echo")
	b := h.Connect(0xe1, nodetest.Limit(4)) // the key's bucket: 4
	b.Register("other")
	first, thread := h.Door(a.Key, "echo", "", "one")
	if f := a.Offer(); f.RunID != first {
		t.Fatalf("offer %s, want %s", f.RunID, first)
	}
	second, _ := h.Door(a.Key, "echo", "", "two")
	h.Taken(second) // waits: a's process holds its 1
	b.Accept(first) // b's process takes the run offered to a
	h.WaitStatus(first, run.Running)
	h.Settle()
	var offered []string
	for _, f := range a.Barrier() {
		var r wire.RunFrame
		if json.Unmarshal(f, &r) == nil && r.Type == wire.TypeRun {
			offered = append(offered, r.RunID)
		}
	}
	if len(offered) != 1 || offered[0] != second {
		t.Fatalf("a was offered %v once b took %s; want %s, its own place being free", offered, first, second)
	}
	b.Complete(first, thread)
	h.WaitStatus(first, run.Completed)
}
