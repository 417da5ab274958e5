package door_test

import (
	"context"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/functions/door"
)

// A door that has relayed a run's terminal event waits for the record to
// settle; the broker's end marker on the live feed wakes that wait at once
// (the bound given is never the reason it returns), and a marker already
// there returns it at once too.
func TestWaitEndWakesOnTheEndMarker(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	feed := livefeed.New(rdb, prefix)
	ctx := context.Background()
	const runID = "run_waitend"
	if err := feed.PublishBatch(ctx, runID, []livefeed.Published{{Seq: 1, Event: []byte(`{"type":"RUN_STARTED"}`)},
		{Seq: 2, Event: []byte(`{"type":"RUN_FINISHED"}`)}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		door.WaitEnd(ctx, feed, runID, 2, time.Hour)
	}()
	select {
	case <-done:
		t.Fatal("WaitEnd returned before any end marker")
	case <-time.After(200 * time.Millisecond): // it is waiting on the feed
	}
	if err := feed.End(ctx, runID, 2, "completed"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("WaitEnd did not wake on the end marker")
	}
	// The marker is there now: a second wait returns without waiting out its bound.
	again := make(chan struct{})
	go func() { defer close(again); door.WaitEnd(ctx, feed, runID, 2, time.Hour) }()
	select {
	case <-again:
	case <-time.After(30 * time.Second):
		t.Fatal("WaitEnd waited although the end marker was already there")
	}
}
