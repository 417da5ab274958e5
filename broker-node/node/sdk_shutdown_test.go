package node_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// An SDK provider shutting down while a handler ignores its cancelled
// context (a blocking LLM call, say) still says how the run ended: when the
// drain gives up, the SDK ends the run itself with a RUN_ERROR naming the
// shutdown and a finish, before it closes the link. The caller gets that
// typed end, and the key is not counted abandoned (design.md D5, D6), which
// a few deploys of such an agent would otherwise turn into a withdrawal.
func TestSDKShutdownEndsARunItsHandlerDidNotReturn(t *testing.T) {
	h := nodetest.Start(t, nil)
	signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xe8))
	started := make(chan string, 1)
	release := make(chan struct{})
	client, err := provider.New(provider.Config{
		BaseURL: h.URL, Signer: signer, FunduqKey: h.Node.FunduqKey(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Agents: []provider.Agent{{Name: "stubborn", Handler: func(ctx context.Context, r *provider.Run) error {
			if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
				return err
			}
			started <- r.ID
			<-release // ignores ctx
			return nil
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() { defer close(returned); _ = client.Run(ctx) }()
	defer func() {
		cancel()
		close(release)
		<-returned
	}()
	<-client.Ready()

	id, _ := h.Door(signer.PublicKeyHex(), "stubborn", "", "hi")
	<-started
	h.Eventually("RUN_STARTED stored", func() bool { return len(h.Events(id)) == 1 })

	cancel() // the provider shuts down; the handler does not return
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason == "provider_left_holding_it" {
		t.Fatalf("the run failed %s: the SDK left holding it", r.FailureReason)
	}
	evs := h.Events(id)
	last := evs[len(evs)-1]
	if last["type"] != "RUN_ERROR" || last["code"] != nil {
		t.Fatalf("the caller's last event is %v, want the provider's own RUN_ERROR", last)
	}
	h.Eventually("the link closed", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	if q := h.Quality(signer.PublicKeyHex()); q.Abandoned != 0 {
		t.Fatalf("quality %+v: a shutdown that reported the run's end counted abandoned", q)
	}
}
