package door_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
)

// freshTail follows runID as a door does the run its request just wrote,
// with the periodic PostgreSQL re-read beyond the test; it returns the
// relayed seqs and how the tail ended.
func freshTail(t *testing.T, st *store.Store, feed *livefeed.Feed, runID string) (chan int, chan door.TailEnd, *door.Tail) {
	t.Helper()
	seqs := make(chan int, 64)
	tail := &door.Tail{
		O: door.TailOptions{Store: st, Feed: feed, LiveBlock: 100 * time.Millisecond,
			PollInterval: 20 * time.Millisecond, DBCheck: time.Hour},
		RunID: runID, Fresh: true,
		Relay: func(seq int, ev json.RawMessage) bool {
			seqs <- seq
			return door.TypeOf(ev) == "RUN_FINISHED"
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ended := make(chan door.TailEnd, 1)
	go func() { ended <- tail.Run(ctx, time.Time{}) }()
	return seqs, ended, tail
}

func nextSeq(t *testing.T, seqs chan int) int {
	t.Helper()
	select {
	case s := <-seqs:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("the tail relayed nothing (hang guard)")
		return 0
	}
}

// A door following the run it just wrote looks at the live feed first, not
// PostgreSQL: what the broker published before the tail started (stored
// first, D9) is relayed from seq 1, and a run whose whole round is on the
// feed costs no read at all — the tail's store here has no database.
func TestFreshTailStartsOnTheLiveFeed(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	feed := livefeed.New(rdb, prefix)
	pool := storetest.Pool(t)
	pool.Close() // any read would fail: the feed alone must serve the tail
	st := store.New(pool, nil)
	ctx := context.Background()
	const runID = "run_fresh"
	if err := feed.PublishBatch(ctx, runID, []livefeed.Published{{Seq: 1, Event: []byte(`{"type":"RUN_STARTED"}`)},
		{Seq: 2, Event: []byte(`{"type":"CUSTOM","name":"x","value":1}`)}}); err != nil {
		t.Fatal(err)
	}
	seqs, ended, tail := freshTail(t, st, feed, runID)
	for want := 1; want <= 2; want++ {
		if s := nextSeq(t, seqs); s != want {
			t.Fatalf("relayed seq %d, want %d", s, want)
		}
	}
	if err := feed.PublishBatch(ctx, runID, []livefeed.Published{{Seq: 3, Event: []byte(`{"type":"RUN_FINISHED"}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := feed.End(ctx, runID, 3, "completed"); err != nil {
		t.Fatal(err)
	}
	if s := nextSeq(t, seqs); s != 3 {
		t.Fatalf("relayed seq %d, want 3", s)
	}
	select {
	case end := <-ended:
		if end != door.TailStopped {
			t.Fatalf("the tail ended %v, want TailStopped", end)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tail did not end at the terminal event (hang guard)")
	}
	// The end marker may or may not have come in the same read; when it
	// did, the tail says so, and it is this round's.
	_ = tail.Ended()
}

// A fresh tail whose feed lacks the run's first entries (a publish that
// failed, a trimmed stream) reads them from PostgreSQL: nothing stored is
// skipped, each event once and in order.
func TestFreshTailFillsAGapFromPostgreSQL(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := redistest.Client(t)
	feed := livefeed.New(rdb, prefix)
	st := store.New(storetest.Pool(t), nil)
	epoch, err := st.AdvanceEpoch(ctx, "test-leader")
	if err != nil {
		t.Fatal(err)
	}
	sg, _ := identity.NewSignerFromSeedHex(fmt.Sprintf("%064x", 0x72))
	key := sg.PublicKeyHex()
	if err := st.RegisterAgents(ctx, epoch, store.Provider{PublicKey: key, Fingerprint: identity.Fingerprint(sg.PublicKey())},
		[]store.Agent{{ProviderKey: key, Name: "echo"}}); err != nil {
		t.Fatal(err)
	}
	runID, threadID := run.NewRunID(), run.NewThreadID()
	b, err := runinput.Build(runinput.Request{ThreadID: threadID, RunID: runID,
		Messages: []json.RawMessage{json.RawMessage(`{"id":"u1","role":"user","content":"hi"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateRun(ctx, store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: key, AgentName: "echo",
		RunInput: b.Bytes, CreateThread: &store.NewThread{}}); err != nil {
		t.Fatal(err)
	}
	store1 := func(ev string, publish bool) {
		t.Helper()
		seq, err := st.AppendEvent(ctx, epoch, runID, json.RawMessage(ev))
		if err != nil {
			t.Fatal(err)
		}
		if publish {
			if err := feed.Publish(ctx, runID, seq, json.RawMessage(ev)); err != nil {
				t.Fatal(err)
			}
		}
	}
	store1(fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, threadID, runID), false) // never published
	store1(`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`, true)
	seqs, ended, _ := freshTail(t, st, feed, runID)
	for want := 1; want <= 2; want++ {
		if s := nextSeq(t, seqs); s != want {
			t.Fatalf("relayed seq %d, want %d (the gap filled from PostgreSQL)", s, want)
		}
	}
	store1(`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`, true)
	store1(fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, threadID, runID), true)
	for want := 3; want <= 4; want++ {
		if s := nextSeq(t, seqs); s != want {
			t.Fatalf("relayed seq %d, want %d", s, want)
		}
	}
	select {
	case end := <-ended:
		if end != door.TailStopped {
			t.Fatalf("the tail ended %v, want TailStopped", end)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tail did not end at the terminal event (hang guard)")
	}
}
