package broker

import (
	"fmt"
	"testing"
)

// The set keeps the last endedRunsKept runs and forgets the oldest first.
func TestEndedRunsKeepsTheLatest(t *testing.T) {
	e := newEndedRuns()
	for i := range endedRunsKept + 10 {
		e.add(fmt.Sprint("run-", i), "k", "")
	}
	e.add("run-20", "k", "") // a repeat changes nothing
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

// A late ack keeps a place once, and only for the key the run's offer
// lapsed on (unwind.go): not for another key, not for a repeat, not for a
// run that ended with no lapse.
func TestEndedRunsLapsedIsTakenOnceByItsKey(t *testing.T) {
	e := newEndedRuns()
	e.add("a", "k", "k")
	e.add("b", "k", "")
	if e.takeLapsed("a", "other") || e.takeLapsed("b", "k") {
		t.Fatal("taken for a key the run's offer did not lapse on")
	}
	if !e.takeLapsed("a", "k") {
		t.Fatal("not taken for the key the offer lapsed on")
	}
	if e.takeLapsed("a", "k") {
		t.Fatal("taken twice")
	}
	if !e.endedFor("a", "k") {
		t.Fatal("the run's end forgotten with its lapse")
	}
}
