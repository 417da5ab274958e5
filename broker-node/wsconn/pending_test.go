package wsconn_test

import (
	"net/http/httptest"
	"testing"

	"github.com/funduq/funduq-go/broker-node/wsconn"
)

// A link's place: given back at its register, taken again past a full
// bound when it serves nothing (design.md §The provider wire,
// "Admission"), never taken again once the link ended.
func TestPlaceIsTakenAgainPastAFullBound(t *testing.T) {
	p := &wsconn.Pending{Max: 1}
	release, ok := p.Admit(httptest.NewRecorder())
	if !ok {
		t.Fatal("the first upgrade was refused")
	}
	pl := wsconn.NewPlace(p, release)
	if pl.Retake() {
		t.Fatal("a link counted now was counted again")
	}
	pl.Leave()
	if p.Count() != 0 {
		t.Fatalf("registered: %d pending", p.Count())
	}
	other, ok := p.Admit(httptest.NewRecorder())
	if !ok {
		t.Fatal("an upgrade was refused with no link pending")
	}
	if !pl.Retake() || p.Count() != 2 {
		t.Fatalf("taken again past a full bound: %d pending, want 2", p.Count())
	}
	if _, ok := p.Admit(httptest.NewRecorder()); ok {
		t.Fatal("an upgrade was admitted past the bound")
	}
	pl.End()
	other()
	if pl.Retake() || p.Count() != 0 {
		t.Fatalf("after the end: %d pending, want 0", p.Count())
	}
}
