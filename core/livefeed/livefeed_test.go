package livefeed_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/redistest"
)

// A reader after seq n gets the events after n in order, then the end
// marker; re-publishing a seq already there is refused.
func TestPublishReadEnd(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	f := livefeed.New(rdb, prefix)
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if err := f.Publish(ctx, "run_1", i, json.RawMessage(`{"type":"CUSTOM","n":`+string(rune('0'+i))+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Publish(ctx, "run_1", 2, json.RawMessage(`{}`)); err == nil {
		t.Fatal("a seq published twice was accepted")
	}
	if err := f.End(ctx, "run_1", 3, "completed"); err != nil {
		t.Fatal(err)
	}
	got, err := f.Read(ctx, "run_1", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Seq != 2 || got[1].Seq != 3 || got[2].End != "completed" || got[2].Seq != 3 {
		t.Fatalf("read after 1: %+v", got)
	}
	if got, _ := f.Read(ctx, "run_1", 3, 0); len(got) != 1 || got[0].End != "completed" {
		t.Fatalf("read after the last event: %+v", got)
	}
	// A run with no events still ends.
	_ = f.End(ctx, "run_2", 0, "cancelled")
	if got, _ := f.Read(ctx, "run_2", 0, 0); len(got) != 1 || got[0].End != "cancelled" {
		t.Fatalf("read of an eventless run: %+v", got)
	}
}

// A blocked read wakes for an event published after it started.
func TestBlockedReadWakes(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	f := livefeed.New(rdb, prefix)
	ctx := context.Background()
	done := make(chan []livefeed.Entry, 1)
	go func() {
		got, _ := f.Read(ctx, "run_1", 0, 10*time.Second)
		done <- got
	}()
	time.Sleep(50 * time.Millisecond) // let the read block (a failure only shows as the guard)
	_ = f.Publish(ctx, "run_1", 1, json.RawMessage(`{"type":"RUN_STARTED"}`))
	select {
	case got := <-done:
		if len(got) != 1 || got[0].Seq != 1 {
			t.Fatalf("got %+v", got)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("blocked read never woke")
	}
}
