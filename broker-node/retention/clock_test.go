package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/retention"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// A pass takes its cutoff from PostgreSQL's clock, which wrote the
// settled times, not from the node's: with the node's clock (time.Now) a
// node running 2h fast under 1h retention deleted a run settled a minute
// before. Here the database's clock decides: the run settled a minute ago
// by it stays, the one settled two hours ago goes, and a pass whose clock
// cannot be read deletes nothing.
func TestPassCutoffIsTheDatabasesClock(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	dbNow, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fresh := Seed(t, st, 1, dbNow.Add(-time.Minute))
	old := Seed(t, st, 1, dbNow.Add(-2*time.Hour))
	c := &retention.Cleaner{Store: st, Retention: time.Hour, Batch: 10}
	p, err := c.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Runs != 1 {
		t.Fatalf("the pass deleted %d runs, want 1 (the one settled 2h ago)", p.Runs)
	}
	for id, want := range map[string]int{fresh[0]: 1, old[0]: 0} {
		var n int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE run_id = $1`, id).Scan(&n); err != nil || n != want {
			t.Fatalf("run %s: %d stored (want %d) %v", id, n, want, err)
		}
	}

	stale := Seed(t, st, 1, dbNow.Add(-2*time.Hour))
	broken := &retention.Cleaner{Store: st, Retention: time.Hour, Batch: 10,
		Now: func(context.Context) (time.Time, error) { return time.Time{}, context.DeadlineExceeded }}
	if _, err := broken.Pass(ctx); err == nil {
		t.Fatal("a pass whose clock could not be read succeeded")
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE run_id = $1`, stale[0]).Scan(&n); err != nil || n != 1 {
		t.Fatalf("a pass without a clock deleted the run (%d left, %v)", n, err)
	}
}
