package run_test

import (
	"testing"

	"github.com/funduq/funduq-go/core/run"
)

func TestStatusMachine(t *testing.T) {
	for _, tc := range []struct {
		w        run.Writer
		from, to run.Status
		legal    bool
	}{
		{run.ByBroker, run.Queued, run.Offering, true},
		{run.ByBroker, run.Queued, run.Running, true}, // late ack
		{run.ByBroker, run.Running, run.Queued, false},
		{run.ByBroker, run.Completed, run.Failed, false},
		{run.ByBroker, run.InputRequired, run.Failed, false}, // a pause has no deadline
		{run.ByBroker, run.InputRequired, run.Cancelled, false},
		{run.ByDoor, run.InputRequired, run.Queued, true}, // the reopen
		{run.ByDoor, run.Queued, run.Cancelled, false},    // doors ask; the lane decides
		{run.ByBroker, run.Cancelling, run.InputRequired, true},
	} {
		if got := run.Legal(tc.w, tc.from, tc.to); got != tc.legal {
			t.Errorf("%s %s→%s legal=%v, want %v", tc.w, tc.from, tc.to, got, tc.legal)
		}
	}
	for _, s := range run.All {
		if s.Terminal() == s.Active() {
			t.Errorf("%s is both or neither terminal and active", s)
		}
	}
	if run.Status("paused").Valid() {
		t.Error("an unknown status is valid")
	}
}

func TestMintedIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := run.NewRunID()
		if !run.IsMintedID(run.RunPrefix, id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"run_", "run_XYZ", "thread_000000000000000000000000", "run_00000000000000000000000g"} {
		if run.IsMintedID(run.RunPrefix, bad) {
			t.Errorf("%q passed as a minted run id", bad)
		}
	}
}
