package door_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/testservers"
)

// A tail following a run on the live feed keeps going when Redis goes: it
// polls the run's stored events in PostgreSQL instead, relays every event
// stored after the feed failed, once and in order, and ends with the
// terminal event. The periodic re-read of PostgreSQL (DBCheck) is set far
// beyond the test, so only the fallback can deliver them.
func TestTailFallsBackToPostgreSQLWhenTheLiveFeedFails(t *testing.T) {
	ctx := context.Background()
	rs := testservers.RedisServer(t)
	st := store.New(storetest.Pool(t), nil)
	opt, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	feed := livefeed.New(rdb, door.RedisPrefix)

	epoch, err := st.AdvanceEpoch(ctx, "test-leader")
	if err != nil {
		t.Fatal(err)
	}
	sg, _ := identity.NewSignerFromSeedHex(fmt.Sprintf("%064x", 0x71))
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
	nr := store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: key, AgentName: "echo", RunInput: b.Bytes,
		CreateThread: &store.NewThread{}}
	if _, _, err := st.CreateRun(ctx, nr); err != nil {
		t.Fatal(err)
	}
	// store appends as the leader does: durable first, then published.
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
	store1(fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, threadID, runID), true)

	seqs := make(chan int, 64)
	tail := &door.Tail{
		O: door.TailOptions{Store: st, Feed: feed, LiveBlock: 100 * time.Millisecond,
			PollInterval: 20 * time.Millisecond, DBCheck: time.Hour},
		RunID: runID,
		Relay: func(seq int, ev json.RawMessage) bool {
			seqs <- seq
			var v struct{ Type string }
			_ = json.Unmarshal(ev, &v)
			return v.Type == "RUN_FINISHED"
		},
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan door.TailEnd, 1)
	go func() { ended <- tail.Run(tctx, time.Time{}) }()
	next := func() int {
		t.Helper()
		select {
		case s := <-seqs:
			return s
		case <-time.After(30 * time.Second):
			t.Fatal("the tail relayed nothing (hang guard)")
			return 0
		}
	}
	if s := next(); s != 1 {
		t.Fatalf("first relayed seq %d", s)
	}
	store1(`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`, true)
	if s := next(); s != 2 {
		t.Fatalf("relayed seq %d, want 2 (from the live feed)", s)
	}

	if err := rs.Stop(); err != nil {
		t.Fatal(err)
	}
	store1(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"a"}`, false)
	store1(`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`, false)
	store1(fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, threadID, runID), false)
	for want := 3; want <= 5; want++ {
		if s := next(); s != want {
			t.Fatalf("relayed seq %d, want %d (once, in order, from PostgreSQL)", s, want)
		}
	}
	select {
	case end := <-ended:
		if end != door.TailStopped {
			t.Fatalf("the tail ended %v, want TailStopped at the terminal event", end)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tail did not end after the terminal event (hang guard)")
	}
	select {
	case s := <-seqs:
		t.Fatalf("seq %d relayed after the terminal event", s)
	default:
	}
}
