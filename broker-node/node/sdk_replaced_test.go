package node_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// Two processes of one key serving the same agents (a rolling deploy: the
// newer process starts before the older one is stopped). The newer one's
// register replaces the older link (D5), and the older process, told so,
// finishes the run it holds over that link, which funduq leaves open,
// closes it and stops (Run returns provider.ErrReplaced) instead of
// registering again and replacing the newer one in turn, which it did
// every few hundred milliseconds while both ran (design.md §Two processes
// of one key).
func TestSDKReplacedByANewerProcessFinishesAndStops(t *testing.T) {
	h := nodetest.Start(t, nil)
	signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xe9))
	started := make(chan string, 1)
	release := make(chan struct{})
	sdk := func(handler provider.Handler) *provider.Client {
		c, err := provider.New(provider.Config{
			BaseURL: h.URL, Signer: signer, FunduqKey: h.Node.FunduqKey(),
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Backoff: provider.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
			Agents:  []provider.Agent{{Name: "echo", Handler: handler}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	older := sdk(func(ctx context.Context, r *provider.Run) error {
		if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
			return err
		}
		started <- r.ID
		<-release
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	olderDone := make(chan error, 1)
	go func() { olderDone <- older.Run(ctx) }()
	<-older.Ready()

	id, _ := h.Door(signer.PublicKeyHex(), "echo", "", "hi")
	<-started
	h.Eventually("RUN_STARTED stored", func() bool { return len(h.Events(id)) == 1 })

	newer := sdk(func(ctx context.Context, r *provider.Run) error {
		if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
			return err
		}
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
	})
	stopNewer := runSDK(newer)
	defer stopNewer()

	close(release) // the older process's run ends
	h.WaitStatus(id, run.Completed)
	select {
	case err := <-olderDone:
		if !errors.Is(err, provider.ErrReplaced) {
			t.Fatalf("the older process's Run returned %v, want ErrReplaced", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the older process did not stop once replaced and done: it keeps taking the agents back")
	}
	h.Eventually("one link left", func() bool { return h.Node.Broker.Snapshot().Links == 1 })

	// The newer process serves on.
	next, _ := h.Door(signer.PublicKeyHex(), "echo", "", "again")
	h.WaitStatus(next, run.Completed)
	h.Settle()
	if q := h.Quality(signer.PublicKeyHex()); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// Replaced while it holds nothing, the older process stops at once.
func TestSDKReplacedHoldingNothingStops(t *testing.T) {
	h := nodetest.Start(t, nil)
	signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xea))
	sdk := func() *provider.Client {
		c, err := provider.New(provider.Config{
			BaseURL: h.URL, Signer: signer, FunduqKey: h.Node.FunduqKey(),
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Backoff: provider.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
			Agents: []provider.Agent{{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
				return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
			}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	older := sdk()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	olderDone := make(chan error, 1)
	go func() { olderDone <- older.Run(ctx) }()
	<-older.Ready()
	stopNewer := runSDK(sdk())
	defer stopNewer()
	select {
	case err := <-olderDone:
		if !errors.Is(err, provider.ErrReplaced) {
			t.Fatalf("the older process's Run returned %v, want ErrReplaced", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the older process did not stop once replaced")
	}
	h.Eventually("one link left", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	id, _ := h.Door(signer.PublicKeyHex(), "echo", "", "hi")
	h.WaitStatus(id, run.Completed)
}
