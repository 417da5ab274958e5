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
