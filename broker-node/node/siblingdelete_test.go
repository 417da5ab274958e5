package node_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
)

// A provider splitting its agents across two links: a deleteAgent sent on
// the link that does not serve the name, while the other link does, is
// refused and changes nothing — the serving link still serves it, GET
// /agents still lists it online, its record stays, and its next run is
// offered there. Deleting happens on the serving link (broker.md §7.2).
func TestDeleteAgentOnASiblingLinkLeavesItServed(t *testing.T) {
	h := nodetest.Start(t, nil)
	a := h.Connect(0xe1, nil)
	a.Register("a")
	b := h.Connect(0xe1, nil)
	b.Register("b", "fresh")
	h.CompletedRun(b, "b", "history")
	for _, name := range []string{"b", "fresh"} { // with history, and without
		a.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: name})
		var e wire.Error
		a.Expect(wire.TypeError, &e)
		if e.Name != name || !strings.Contains(e.Message, "another link") {
			t.Fatalf("error %+v", e)
		}
	}
	l := listing(t, h)
	for _, name := range []string{"a", "b", "fresh"} {
		if !l[a.Key[:4]+"/"+name].Online {
			t.Fatalf("%s not listed online after a sibling's refused delete: %+v", name, l)
		}
	}
	for _, name := range []string{"b", "fresh"} {
		id, thread := h.Door(b.Key, name, "", "next")
		if f := b.Offer(); f.RunID != id {
			t.Fatalf("offer %s, want %s", f.RunID, id)
		}
		b.Accept(id)
		b.Complete(id, thread)
	}
	a.None()
}
