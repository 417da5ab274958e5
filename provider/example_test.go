package provider_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/provider"
)

// A provider serving one agent that greets the user.
func Example() {
	signer, err := identity.NewSignerFromSeedHex(os.Getenv("AGENT_SEED_HEX"))
	if err != nil {
		log.Fatal(err)
	}
	client, err := provider.New(provider.Config{
		BaseURL: "http://127.0.0.1:8700",
		Signer:  signer,
		Agents: []provider.Agent{{
			Name:        "greeter",
			Description: "Says hello.",
			Handler: func(ctx context.Context, run *provider.Run) error {
				if err := run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID}); err != nil {
					return err
				}
				if err := run.EmitText(ctx, run.ID+"-m", "hello, "+run.LastUserText()); err != nil {
					return err
				}
				return run.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID})
			},
		}},
		SerializePerThread: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// ErrReplaced: a newer process of this key serves the agents now (a
	// rolling deploy); exiting 0 keeps a supervisor from restarting this
	// one into taking them back. Any other error ends the process non-zero,
	// ErrRegisterRefused among them: funduq refused the agents past one of
	// its limits, which the error names.
	if err := client.Run(ctx); err != nil && !errors.Is(err, provider.ErrReplaced) {
		log.Fatal(err)
	}
}
