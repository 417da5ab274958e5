package broker

import (
	"testing"

	"github.com/funduq/funduq-go/core/run"
)

// checkHeads asserts headsByKey lists exactly each thread's head under
// its agent's key.
func checkHeads(t *testing.T, h *harness) {
	t.Helper()
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, m := range b.headsByKey {
		n += len(m)
	}
	if n != len(b.threads) {
		t.Fatalf("%d heads indexed for %d threads", n, len(b.threads))
	}
	for tid, dq := range b.threads {
		if got := b.headsByKey[dq[0].agent.Key][tid]; got != dq[0] {
			t.Fatalf("thread %s: indexed head %v, want %s", tid, got, dq[0].id)
		}
	}
}

// A place freed on a key reaches the head waiting for that key, found
// through the heads-by-key index, and the index follows every queue's
// head as runs join, start and end.
func TestLaneFreedPlaceReachesTheKeysWaitingHead(t *testing.T) {
	h := newHarness(t, Settings{})
	a := h.connect(0xe1, limit(1))
	a.register("echo")
	other := h.connect(0xe2, limit(1))
	other.register("else")

	busy, busyThread := h.door(a.key, "echo", "busy")
	if got := a.offer(); got != busy {
		t.Fatalf("offered %s", got)
	}
	a.accept(busy)
	h.waitStatus(busy, run.Running)
	waiting, waitingThread := h.door(a.key, "echo", "waits for the place") // a head on a full key
	elsewhere, _ := h.door(other.key, "else", "another key's head")
	if got := other.offer(); got != elsewhere {
		t.Fatalf("offered %s", got)
	}
	h.settle()
	checkHeads(t, h)
	a.none()

	a.complete(busy, busyThread)
	h.waitStatus(busy, run.Completed)
	if got := a.offer(); got != waiting {
		t.Fatalf("the freed place went to %s, want %s", got, waiting)
	}
	a.accept(waiting)
	a.complete(waiting, waitingThread)
	h.waitStatus(waiting, run.Completed)
	h.settle()
	checkHeads(t, h)
}

// checkHolds asserts byLink lists exactly, per link, the live lanes
// claimed by or offered to it.
func checkHolds(t *testing.T, h *harness) {
	t.Helper()
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	want := map[*linkState]map[*lane]struct{}{}
	for _, l := range b.lanes {
		for _, ls := range [2]*linkState{l.claimedBy, l.offeredTo} {
			if ls == nil {
				continue
			}
			if want[ls] == nil {
				want[ls] = map[*lane]struct{}{}
			}
			want[ls][l] = struct{}{}
		}
	}
	if len(want) != len(b.byLink) {
		t.Fatalf("%d links indexed, %d hold lanes", len(b.byLink), len(want))
	}
	for ls, m := range want {
		if len(b.byLink[ls]) != len(m) {
			t.Fatalf("link %d: %d lanes indexed, holds %d", ls.id, len(b.byLink[ls]), len(m))
		}
		for l := range m {
			if _, ok := b.byLink[ls][l]; !ok {
				t.Fatalf("link %d: lane %s not indexed", ls.id, l.id)
			}
		}
	}
}

// A link that closes tells the lanes it holds — the one it runs and the
// one offered to it — and no other link's: found through the by-link
// index, which follows every offer, claim, hand-back and end.
func TestLaneClosedLinkReachesOnlyItsLanes(t *testing.T) {
	h := newHarness(t, Settings{})
	a := h.connect(0xe3, nil)
	a.register("echo")
	other := h.connect(0xe4, nil)
	other.register("else")

	running, _ := h.door(a.key, "echo", "runs on a")
	a.takes(running)
	offered, _ := h.door(a.key, "echo", "offered to a")
	if got := a.offer(); got != offered {
		t.Fatalf("offered %s", got)
	}
	elsewhere, elsewhereThread := h.door(other.key, "else", "runs on the other key")
	other.takes(elsewhere)
	h.settle()
	checkHolds(t, h)

	a.goodbye()
	h.waitStatus(running, run.Failed)
	h.waitStatus(offered, run.Queued)
	h.settle()
	checkHolds(t, h)
	if got := h.run(elsewhere).Status; got != run.Running {
		t.Fatalf("the other key's run is %s after a's link closed", got)
	}
	other.none()

	other.complete(elsewhere, elsewhereThread)
	h.waitStatus(elsewhere, run.Completed)
	h.settle()
	checkHolds(t, h)
	h.b.mu.Lock()
	n := len(h.b.byLink)
	h.b.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d links still indexed with nothing held", n)
	}
}
