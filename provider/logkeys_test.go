package provider

import (
	"context"
	"log/slog"
	"regexp"
	"testing"

	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// The SDK's log lines use the broker's key names (docs/design.md §Logs:
// one key name for each thing, everywhere, and snake_case as the broker
// writes them), so one query finds a run on both sides: a line about a run
// this client holds names its thread too. The registration line said
// pausedRounds and pausedRefused, and the line for funduq's cancel named
// the run without its thread.
func TestSDKLogKeysAreTheBrokers(t *testing.T) {
	f := newFakeFunduq(t)
	var logs syncbuf.Buffer
	started := make(chan struct{}, 1)
	cfg := baseConfig(t, f, Agent{Name: "a", Handler: func(ctx context.Context, r *Run) error {
		started <- struct{}{}
		<-ctx.Done()
		return r.Emit(context.Background(), map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
	}})
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	startClient(t, cfg)
	p := f.registeredPeer(t)
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	<-started
	p.send(t, wire.Cancel{Type: wire.TypeCancel, RunID: "r-1"})
	p.expectEvent(t, "r-1", 1)
	p.expectFinish(t, "r-1") // the cancel was logged before the handler saw it

	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var cancel map[string]any
	for _, rec := range logs.Records() {
		for k := range rec {
			if !snake.MatchString(k) {
				t.Errorf("key %q is not one the broker's logs use (snake_case): %v", k, rec)
			}
		}
		if rec["msg"] == "funduq asked to cancel run" {
			cancel = rec
		}
	}
	if cancel == nil || cancel["run_id"] != "r-1" || cancel["thread_id"] != "t-1" || cancel["provider_key"] == nil {
		t.Errorf("the cancel of a held run was logged as %v, want run_id, thread_id and provider_key; log:\n%s", cancel, logs.String())
	}
}
