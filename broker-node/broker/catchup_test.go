package broker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

const catchUpKey = "29e5833a915a6429a4e3a7948475c338ef436eb82be89c92f059704403db9d55"

// The takeover's read-back and a catch-up read the queue in pages of
// QueuePage: with more queued runs than one page, every one of them is
// taken into a lane, none twice.
func TestQueueReadInPages(t *testing.T) {
	ctx := t.Context()
	st := storetest.Store(t)
	storetest.Agent(t, st, catchUpKey, "echo")
	queue := func(n int) (ids []string) {
		for range n {
			runID, threadID := run.NewRunID(), run.NewThreadID()
			input, _ := json.Marshal(map[string]any{"threadId": threadID, "runId": runID})
			r, _, err := st.CreateRun(ctx, store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: catchUpKey,
				AgentName: "echo", CreateThread: &store.NewThread{}, RunInput: input})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.RunID)
		}
		return ids
	}
	// The agent was served under the previous epoch, so its runs wait for
	// its provider through provider_grace (on a clock that never moves)
	// instead of failing agent_offline: they stay in their lanes.
	old, err := st.AdvanceEpoch(ctx, "node-old", "http://old")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE agents SET served_epoch = $1`, old); err != nil {
		t.Fatal(err)
	}
	epoch, err := st.AdvanceEpoch(ctx, "node-new", "http://new")
	if err != nil {
		t.Fatal(err)
	}
	readBack := queue(5) // three pages of 2 at takeover

	b := New(Options{Store: st, Clock: clockwork.NewFakeClock(),
		Settings: Settings{QueuePage: 2, ProviderGrace: time.Hour}})
	runCtx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.Run(runCtx, epoch, func(ctx context.Context) error {
			close(ready) // recovery is done
			<-ctx.Done()
			return nil
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run ended before leading: %v", err)
	}
	inLanes := func(ids []string) {
		t.Helper()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, id := range ids {
			if b.lanes[id] == nil {
				t.Errorf("queued run %s not taken", id)
			}
		}
	}
	inLanes(readBack)

	missed := queue(6) // notifications missed: three full pages and an empty one
	b.CatchUp(ctx, "test")
	inLanes(missed)
	b.mu.Lock()
	if n := len(b.lanes); n != len(readBack)+len(missed) {
		t.Errorf("%d lanes, want %d", n, len(readBack)+len(missed))
	}
	b.mu.Unlock()
}
