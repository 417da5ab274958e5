package node_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// An event so large that funduq closes the link over it (1009, past
// sixteen times FUNDUQ_MAX_FRAME_BYTES) must not be resent on every
// reconnect: that closed each new link again, so the provider's other runs
// stalled and its runs never ended. The SDK ends the run that emitted it
// with a RUN_ERROR in its place, its handler sees provider.ErrEventTooLarge,
// and the provider's other run completes on the next link.
func TestSDKEventThatClosesTheLinkIsNotResent(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) {
		c.MaxFrame, c.MaxEventBytes = 4096, 1024
		c.LinkGrace = 5 * time.Second // the SDK reconnects within it, its runs held
	})
	signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xe9))
	slowStarted := make(chan struct{})
	releaseSlow := make(chan struct{})
	cause := make(chan error, 1)
	client, err := provider.New(provider.Config{
		BaseURL: h.URL, Signer: signer, FunduqKey: h.Node.FunduqKey(),
		Backoff: provider.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Agents: []provider.Agent{
			{Name: "slow", Handler: func(ctx context.Context, r *provider.Run) error {
				if err := sdkStart(ctx, r); err != nil {
					return err
				}
				close(slowStarted)
				<-releaseSlow
				return sdkReply(ctx, r, "done")
			}},
			{Name: "huge", Handler: func(ctx context.Context, r *provider.Run) error {
				if err := sdkStart(ctx, r); err != nil {
					return err
				}
				// 128 KiB: over 16 × 4096, so funduq closes the link.
				if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "blob", "value": strings.Repeat("x", 128<<10)}); err != nil {
					return err
				}
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runSDK(client)()
	var once sync.Once
	release := func() { once.Do(func() { close(releaseSlow) }) }
	defer release() // before the client stops: Run waits for its handlers

	slow, _ := h.Door(signer.PublicKeyHex(), "slow", "", "take your time")
	<-slowStarted
	huge, _ := h.Door(signer.PublicKeyHex(), "huge", "", "a big one")
	r := h.WaitStatus(huge, run.Failed)
	evs := h.Events(huge)
	if last := evs[len(evs)-1]; last["type"] != "RUN_ERROR" || last["code"] != nil {
		t.Fatalf("run %s (%s) ended on %v, want the SDK's RUN_ERROR", huge, r.FailureReason, last)
	}
	if err := <-cause; !errors.Is(err, provider.ErrEventTooLarge) {
		t.Fatalf("the handler's context ended with %v, want ErrEventTooLarge", err)
	}
	release()
	h.WaitStatus(slow, run.Completed)
	if q := h.Quality(signer.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 {
		t.Fatalf("quality %+v", q)
	}
}
