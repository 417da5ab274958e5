package node_test

import (
	"slices"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
)

// servedNames is the names of key the broker's roster serves now.
func servedNames(h *nodetest.Harness, key string) []string {
	var names []string
	for _, ref := range h.Node.Broker.Snapshot().Served {
		if ref.Key == key {
			names = append(names, ref.Name)
		}
	}
	slices.Sort(names)
	return names
}

// Two links of one key, the newer registering a subset of the older's
// agents: the older goes on serving the rest and is told, name by name,
// what was taken (wire.TakenMessage, an error frame naming the agent), so
// that its process can leave those names out of its next register
// (design.md §Two processes of one key). A raw provider that ignores the
// notice behaves as before: its next register takes the name back, and
// the newer link, left serving nothing, is told replaced.
func TestRawLinkToldWhichAgentsAnotherLinkOfItsKeyTook(t *testing.T) {
	h := nodetest.Start(t, nil)
	older := h.Connect(0xe1, nil)
	older.Register("x", "y")
	newer := h.Connect(0xe1, nil)
	newer.Register("x")
	var e wire.Error
	older.Expect(wire.TypeError, &e)
	if e.Name != "x" || e.Message != wire.TakenMessage || e.RunID != "" {
		t.Fatalf("older link told %+v, want the taken notice naming x", e)
	}
	older.None()
	newer.None()
	if got := servedNames(h, older.Key); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("served %v", got)
	}
	id, _ := h.Door(older.Key, "x", "", "hi")
	if f := newer.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
	newer.Decline(id)
	// Ignoring the notice, as the reference's SDK does: the whole roster
	// again takes x back, as it always did.
	older.Register("x", "y")
	newer.Expect(wire.TypeError, &e)
	if e.Message != wire.ReplacedMessage {
		t.Fatalf("newer link told %+v, want replaced", e)
	}
	if f := older.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
}

// An agent taken from a link is announced free (wire.FreedMessage) to the
// key's other registered links once no link serves it: here the newer
// link leaves after the older process reconnected without the taken name
// (as our SDK does), so the new link, which never declared x to funduq,
// is told too, and registering x again serves it there. An agent never
// taken is announced to nobody: a key splitting different agents across
// processes hears nothing new when one of them leaves.
func TestRawTakenAgentIsAnnouncedFreeWhenItsTakerLeaves(t *testing.T) {
	h := nodetest.Start(t, nil)
	older := h.Connect(0xe2, nil)
	older.Register("x", "y")
	newer := h.Connect(0xe2, nil)
	newer.Register("x", "z")
	var e wire.Error
	older.Expect(wire.TypeError, &e)
	if e.Name != "x" || e.Message != wire.TakenMessage {
		t.Fatalf("older link told %+v", e)
	}
	older.Close() // lost: its process reconnects
	h.Eventually("older link detached", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	again := h.Connect(0xe2, nil)
	again.Register("y")
	newer.Goodbye()
	again.Expect(wire.TypeError, &e)
	if e.Name != "x" || e.Message != wire.FreedMessage || e.RunID != "" {
		t.Fatalf("reconnected link told %+v, want x announced free", e)
	}
	again.None() // z was never taken: not announced
	if got := servedNames(h, again.Key); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("served %v after the newer link left, want y alone until x is registered again", got)
	}
	again.Register("x", "y")
	id, _ := h.Door(again.Key, "x", "", "hi")
	if f := again.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}

	// A split key with no takeover: nothing is announced.
	a := h.Connect(0xe3, nil)
	a.Register("a")
	b := h.Connect(0xe3, nil)
	b.Register("b")
	b.Goodbye()
	a.None()
}

// The taken name also goes free when its taker drops it from a register
// or deletes it, not only when its link ends.
func TestRawTakenAgentIsAnnouncedFreeWhenDroppedOrDeleted(t *testing.T) {
	h := nodetest.Start(t, nil)
	older := h.Connect(0xe4, nil)
	older.Register("x", "y", "w")
	newer := h.Connect(0xe4, nil)
	newer.Register("x", "w", "z")
	var e wire.Error
	for _, want := range []string{"w", "x"} {
		older.Expect(wire.TypeError, &e)
		if e.Name != want || e.Message != wire.TakenMessage {
			t.Fatalf("older link told %+v, want %s taken", e, want)
		}
	}
	newer.Register("w", "z") // drops x
	older.Expect(wire.TypeError, &e)
	if e.Name != "x" || e.Message != wire.FreedMessage {
		t.Fatalf("older link told %+v, want x free", e)
	}
	newer.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "w"})
	newer.Expect(wire.TypeDeleted, nil)
	older.Expect(wire.TypeError, &e)
	if e.Name != "w" || e.Message != wire.FreedMessage {
		t.Fatalf("older link told %+v, want w free", e)
	}
	older.None()
	newer.None()
}
