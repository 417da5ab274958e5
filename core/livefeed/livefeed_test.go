package livefeed_test

import (
	"context"
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// EndWith's marker carries its outcome to a reader; one over the cap is
// left out and flagged; End's (an older broker's) carries none; fields a
// reader does not know are ignored.
func TestEndWithOutcome(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	f := livefeed.New(rdb, prefix)
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 3, 4, 5, 123456000, time.UTC)
	o := livefeed.Outcome{Status: "completed", LastSeq: 2, LastActivityAt: at,
		Messages: []livefeed.OutcomeMessage{{ID: "msg_1", Message: json.RawMessage(`{"role":"assistant","content":"hi"}`)}}}
	if err := f.EndWith(ctx, "run_1", o); err != nil {
		t.Fatal(err)
	}
	got, err := f.Read(ctx, "run_1", 1, 0)
	if err != nil || len(got) != 1 || got[0].End != "completed" || got[0].Seq != 2 || got[0].OutcomeOmitted {
		t.Fatalf("read %+v, %v", got, err)
	}
	back, err := livefeed.ParseOutcome(got[0].Outcome)
	if err != nil || back.Status != o.Status || back.LastSeq != 2 || !back.LastActivityAt.Equal(at) ||
		len(back.Messages) != 1 || back.Messages[0].ID != "msg_1" || string(back.Messages[0].Message) != string(o.Messages[0].Message) {
		t.Fatalf("outcome %s parsed as %+v, %v", got[0].Outcome, back, err)
	}

	big := livefeed.Outcome{Status: "input-required", LastSeq: 1, LastActivityAt: at,
		Interrupt: json.RawMessage(`{"interrupts":[{"id":"` + strings.Repeat("x", livefeed.MaxOutcome) + `"}]}`)}
	if err := f.EndWith(ctx, "run_2", big); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Read(ctx, "run_2", 0, 0); len(got) != 1 || got[0].End != "input-required" || got[0].Outcome != nil || !got[0].OutcomeOmitted {
		t.Fatalf("over the cap: %+v", got)
	}

	_ = f.End(ctx, "run_3", 4, "failed")
	if got, _ := f.Read(ctx, "run_3", 3, 0); len(got) != 1 || got[0].End != "failed" || got[0].Outcome != nil || got[0].OutcomeOmitted {
		t.Fatalf("a marker without an outcome: %+v", got)
	}

	// A newer broker's marker, with a field this reader does not know.
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Key("run_4"), ID: "1-2",
		Values: []any{"end", "completed", "outcome", "{}", "summary", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Read(ctx, "run_4", 0, 0); len(got) != 1 || got[0].End != "completed" || string(got[0].Outcome) != "{}" {
		t.Fatalf("a marker with an unknown field: %+v", got)
	}
	if _, err := livefeed.ParseOutcome(json.RawMessage("{}")); err == nil {
		t.Fatal("an outcome without a status parsed")
	}
}

// pipelines counts the pipelines a client sends.
type pipelines struct{ n atomic.Int64 }

func (*pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.n.Add(1)
		return next(ctx, cmds)
	}
}

// blockedOnRead tells whether the client named name is blocked in XREAD.
func blockedOnRead(t *testing.T, rdb *redis.Client, name string) bool {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if slices.Contains(f, "name="+name) && slices.Contains(f, "flags=b") && slices.Contains(f, "cmd=xread") {
			return true
		}
	}
	return false
}

// A round's last events and its end marker go out in one round trip, in
// that order, so a reader waiting on the stream gets them in one read; an
// event published already does not keep the marker out.
func TestPublishAndEnd(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	var count pipelines
	rdb.AddHook(&count)
	f := livefeed.New(rdb, prefix)
	ctx := context.Background()
	if err := f.Publish(ctx, "run_1", 1, json.RawMessage(`{"type":"RUN_STARTED"}`)); err != nil {
		t.Fatal(err)
	}
	// The reader has a client of its own, named, so neither its commands nor
	// another test's blocked clients can stand in for it.
	ro := *rdb.Options()
	ro.ClientName = strings.ReplaceAll(prefix, ":", "-") + "reader"
	rc := redis.NewClient(&ro)
	defer rc.Close()
	reading := make(chan []livefeed.Entry, 1)
	go func() {
		got, _ := livefeed.New(rc, prefix).Read(ctx, "run_1", 1, 10*time.Second)
		reading <- got
	}()
	// Wait until that read blocks on the stream (Redis lists it blocked).
	for !blockedOnRead(t, rdb, ro.ClientName) {
		runtime.Gosched()
	}
	before := count.n.Load()
	o := livefeed.Outcome{Status: "completed", LastSeq: 3, LastActivityAt: time.Now().UTC()}
	evs := []livefeed.Published{{Seq: 2, Event: json.RawMessage(`{"type":"CUSTOM"}`)}, {Seq: 3, Event: json.RawMessage(`{"type":"RUN_FINISHED"}`)}}
	if err := f.PublishAndEnd(ctx, "run_1", evs, o); err != nil {
		t.Fatal(err)
	}
	if n := count.n.Load() - before; n != 1 {
		t.Fatalf("events and their end took %d round trips, want 1", n)
	}
	got := <-reading
	if len(got) != 3 || got[0].Seq != 2 || got[1].Seq != 3 || got[2].End != "completed" || got[2].Seq != 3 || got[2].Outcome == nil {
		t.Fatalf("one blocked read got %+v, want seqs 2, 3 and the marker", got)
	}

	// Seq 1 is there already: refused, and the marker still goes in.
	_ = f.Publish(ctx, "run_2", 1, json.RawMessage(`{}`))
	err := f.PublishAndEnd(ctx, "run_2", []livefeed.Published{{Seq: 1, Event: json.RawMessage(`{}`)}}, livefeed.Outcome{Status: "failed", LastSeq: 1})
	if err == nil {
		t.Fatal("a seq published twice was accepted")
	}
	if got, _ := f.Read(ctx, "run_2", 1, 0); len(got) != 1 || got[0].End != "failed" {
		t.Fatalf("after a refused event: %+v, want the marker", got)
	}
}
