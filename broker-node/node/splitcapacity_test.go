package node_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// A provider splitting its agents across two processes (two links of one
// key), each declaring what it can run itself: b's process says 1, a's
// says 2, and each declines anything beyond its own. b's process, holding
// its 1, is offered nothing more (design.md §The provider wire, capacity),
// so it declines nothing and nothing is counted; a's process still has its
// own room, and b's second run is offered once its first ends.
func TestSplitProviderDeclaringPerProcess(t *testing.T) {
	h := nodetest.Start(t, nil)
	b := h.Connect(0xe1, nodetest.Limit(1))
	b.Register("b")
	a := h.Connect(0xe1, nodetest.Limit(2))
	a.Register("a")
	first, firstThread := h.Door(b.Key, "b", "", "one")
	if got := b.Offer().RunID; got != first {
		t.Fatalf("offered %s, want %s", got, first)
	}
	b.Accept(first)
	h.WaitStatus(first, run.Running)
	second, secondThread := h.Door(b.Key, "b", "", "two")
	h.Taken(second)
	declined := b.DeclineOffers() // b's process holds its 1
	h.Settle()
	if q := h.Quality(b.Key); q.Misdeclared != 0 {
		t.Fatalf("b's process declined %v beyond its own declaration of 1 and was counted %+v", declined, q)
	}
	h.CompletedRun(a, "a", "x") // a's process has room of its own

	b.Complete(first, firstThread)
	h.WaitStatus(first, run.Completed)
	if got := b.Offer().RunID; got != second {
		t.Fatalf("offered %s, want %s", got, second)
	}
	b.Accept(second)
	b.Complete(second, secondThread)
	h.WaitStatus(second, run.Completed)
	h.Settle()
	if q := h.Quality(b.Key); charges(q) != 0 || q.WithdrawnAt != nil {
		t.Fatalf("counted %+v", q)
	}
}
