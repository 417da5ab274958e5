package store_test

import (
	"context"
	"testing"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// A run contributes at most one of abandoned and undelivered (design.md
// §Counters), whichever leader counts it: the second count for the run,
// under a later epoch too, changes nothing; another run still counts.
func TestBumpForRunCountsARunOnce(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	first, _ := st.AdvanceEpoch(ctx, "node-a")
	r, other := newRun(t, st), newRun(t, st)
	q, counted, err := st.BumpForRun(ctx, first, testProviderKey, store.Undelivered, r.RunID)
	if err != nil || !counted || q.Undelivered != 1 {
		t.Fatalf("first count: %+v counted=%v err=%v", q, counted, err)
	}
	next, _ := st.AdvanceEpoch(ctx, "node-b")
	q, counted, err = st.BumpForRun(ctx, next, testProviderKey, store.Abandoned, r.RunID)
	if err != nil || counted || q.Abandoned != 0 || q.Undelivered != 1 {
		t.Fatalf("second count of one run: %+v counted=%v err=%v", q, counted, err)
	}
	q, counted, err = st.BumpForRun(ctx, next, testProviderKey, store.Abandoned, other.RunID)
	if err != nil || !counted || q.Abandoned != 1 {
		t.Fatalf("another run: %+v counted=%v err=%v", q, counted, err)
	}
	if _, _, err := st.BumpForRun(ctx, next, testProviderKey, store.Misdeclared, other.RunID); err == nil {
		t.Fatal("misdeclared counted per run")
	}
}
