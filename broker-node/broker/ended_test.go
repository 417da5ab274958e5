package broker

import (
	"fmt"
	"testing"
)

// The set keeps the last endedRunsKept runs and forgets the oldest first.
func TestEndedRunsKeepsTheLatest(t *testing.T) {
	e := newEndedRuns()
	for i := range endedRunsKept + 10 {
		e.add(fmt.Sprint("run-", i), "k")
	}
	e.add("run-20", "k") // a repeat changes nothing
	for i := range 10 {
		if e.has(fmt.Sprint("run-", i)) {
			t.Fatalf("run-%d kept past the bound", i)
		}
	}
	for _, i := range []int{10, 20, endedRunsKept + 9} {
		if !e.has(fmt.Sprint("run-", i)) {
			t.Fatalf("run-%d forgotten within the bound", i)
		}
	}
	if len(e.ids) != endedRunsKept {
		t.Fatalf("%d ids kept, want %d", len(e.ids), endedRunsKept)
	}
}
