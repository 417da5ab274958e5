package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// The overview counts the active runs by status, picks the oldest queued
// and the longest running run, counts recent failures by reason, and
// passes on PostgreSQL's estimate of the rest once it has one.
func TestRunsOverview(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	ov, err := st.RunsOverview(ctx, time.Hour)
	if err != nil || len(ov.ByStatus) != 0 || len(ov.Estimated) != 0 || ov.EstimatedAt != nil || ov.OldestQueued != nil || ov.LongestRunning != nil || len(ov.Failures) != 0 {
		t.Fatalf("empty: %+v %v", ov, err)
	}
	q1, q2, r1, r2, f1, f2, f3 := newRun(t, st), newRun(t, st), newRun(t, st), newRun(t, st), newRun(t, st), newRun(t, st), newRun(t, st)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`UPDATE runs SET queued_at = now() - interval '1 minute' WHERE run_id = $1`, q2.RunID)
	forceStatus(t, st, r1.RunID, run.Running)
	forceStatus(t, st, r2.RunID, run.Running)
	exec(`UPDATE runs SET started_at = now() - interval '10 minutes' WHERE run_id = $1`, r1.RunID)
	exec(`UPDATE runs SET started_at = now() WHERE run_id = $1`, r2.RunID)
	for _, r := range []string{f1.RunID, f2.RunID, f3.RunID} {
		forceStatus(t, st, r, run.Failed)
	}
	// A run's end writes completed_at with its status (forceStatus does not).
	exec(`UPDATE runs SET completed_at = now() WHERE run_id = $1`, f1.RunID)
	exec(`UPDATE runs SET failure_reason = 'no_provider', completed_at = now() WHERE run_id = $1`, f3.RunID)
	exec(`UPDATE runs SET completed_at = now() - interval '2 hours', last_activity_at = now() - interval '2 hours' WHERE run_id = $1`, f2.RunID)

	ov, err = st.RunsOverview(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Exact counts are the active statuses' only: failed runs are history.
	if len(ov.ByStatus) != 2 || ov.ByStatus["queued"] != 2 || ov.ByStatus["running"] != 2 {
		t.Fatalf("by status %v", ov.ByStatus)
	}
	if ov.OldestQueued == nil || ov.OldestQueued.RunID != q2.RunID || ov.OldestQueued.Age < time.Minute {
		t.Fatalf("oldest queued %+v (want %s, not %s)", ov.OldestQueued, q2.RunID, q1.RunID)
	}
	if ov.LongestRunning == nil || ov.LongestRunning.RunID != r1.RunID || ov.LongestRunning.Age < 10*time.Minute {
		t.Fatalf("longest running %+v", ov.LongestRunning)
	}
	// f2 failed two hours ago: outside the window.
	if len(ov.Failures) != 2 || ov.Failures[0].Reason != "no_provider" || ov.Failures[0].Count != 1 ||
		ov.Failures[1].Reason != "seeded" || ov.Failures[1].Count != 1 {
		t.Fatalf("failures %+v", ov.Failures)
	}

	// The estimate is PostgreSQL's, as of its last ANALYZE: a table this
	// small is sampled whole, so it is exact here.
	exec(`ANALYZE runs`)
	ov, err = st.RunsOverview(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ov.EstimatedTotal != 7 || ov.EstimatedAt == nil || len(ov.Estimated) != 3 ||
		ov.Estimated["queued"] != 2 || ov.Estimated["running"] != 2 || ov.Estimated["failed"] != 3 {
		t.Fatalf("estimated %v of %d at %v", ov.Estimated, ov.EstimatedTotal, ov.EstimatedAt)
	}

	// The provider is known, and not online (no leader serves it).
	ps, err := st.ProvidersByKey(ctx, []string{testProviderKey, "unknown"})
	if err != nil || len(ps) != 1 || ps[testProviderKey].Fingerprint != testFingerprint || len(ps[testProviderKey].Online) != 0 {
		t.Fatalf("providers %+v %v", ps, err)
	}
	if online, total, err := st.OnlineProviders(ctx, 10); err != nil || len(online) != 0 || total != 0 {
		t.Fatalf("online providers %+v (%d in all) %v", online, total, err)
	}
}

// A runs table analyzed while empty keeps reltuples 0 as it grows, until
// the next ANALYZE: passed on as it stands, the page said "about 0 runs
// stored in all" beside the active runs it counts exactly. The estimate
// is PostgreSQL's planner's, scaled to the table's size now, or none.
func TestRunsOverviewEstimateAnalyzedEmptyThenGrown(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	if _, err := st.Pool().Exec(ctx, `ANALYZE runs`); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		newRun(t, st)
	}
	ov, err := st.RunsOverview(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	active := int64(0)
	for _, n := range ov.ByStatus {
		active += n
	}
	if active != 40 {
		t.Fatalf("active %v", ov.ByStatus)
	}
	if ov.EstimatedTotal >= 0 && ov.EstimatedTotal < active {
		t.Fatalf("estimated %d runs stored in all (at %v), %d active counted exactly", ov.EstimatedTotal, ov.EstimatedAt, active)
	}
	for st, n := range ov.Estimated {
		if n < 0 {
			t.Fatalf("estimated %s %d", st, n)
		}
	}
}
