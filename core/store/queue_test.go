package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// QueuedRuns pages through the queue oldest first: pages follow one another
// without a gap or a repeat, runs that left queued are not listed, and runs
// sharing a queued_at are ordered by run id.
func TestQueuedRunsPages(t *testing.T) {
	ctx := context.Background()
	st := storetest.Store(t)
	seedAgent(t, st)
	var want []string
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	for i := range 7 {
		r := newRun(t, st)
		if i == 3 {
			forceStatus(t, st, r.RunID, run.Running) // not queued: never listed
			continue
		}
		// Two runs per instant, so the run id breaks the ties.
		if _, err := st.Pool().Exec(ctx, `UPDATE runs SET queued_at = $2 WHERE run_id = $1`,
			r.RunID, at.Add(time.Duration(i/2)*time.Second)); err != nil {
			t.Fatal(err)
		}
		want = append(want, r.RunID)
	}
	// The expected order: by queued_at, then run id.
	rows, err := st.Pool().Query(ctx, `SELECT run_id FROM runs WHERE run_id = ANY($1) ORDER BY queued_at, run_id`, want)
	if err != nil {
		t.Fatal(err)
	}
	want = want[:0]
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	var got []string
	var after store.QueueCursor
	pages := 0
	for {
		page, err := st.QueuedRuns(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range page {
			got = append(got, r.RunID)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].QueueCursor()
	}
	if len(got) != len(want) {
		t.Fatalf("pages listed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pages listed %v, want %v", got, want)
		}
	}
	if pages != 4 { // 2 + 2 + 2 + 0
		t.Fatalf("%d pages read, want 4", pages)
	}
}
