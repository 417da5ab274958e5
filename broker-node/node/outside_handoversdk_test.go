package node_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// An ordinary graceful handover (`broker-node lease handover`) with our
// SDK's provider connected: in a deployment of one node (the README's
// local stack, the provider pointed at the node itself) and of two behind
// a load balancer. The node that is not the leader refuses tickets while
// the takeover is under way (design.md §Deployment, "A takeover under
// way"); once the new epoch is taken the provider serves a new run, and
// every node issues tickets again — nothing stays refused after the
// takeover.
func TestOutsideSDKProviderThroughAGracefulHandover(t *testing.T) {
	for _, tc := range []struct {
		name string
		two  bool
	}{{"one node", false}, {"two nodes behind a balancer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			// As deployed (D14's 30 s), not nodetest's 0: a run queued
			// before the provider's link is back waits for it.
			a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
			nodes, next := []*nodetest.Harness{a}, a
			base := a.URL
			if tc.two {
				b := a.Peer("node-b")
				nodes, next = append(nodes, b), b
				base = nodetest.Balancer(t, a, b)
			}
			signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xe8))
			client, err := provider.New(provider.Config{
				BaseURL: base, Signer: signer, FunduqKey: a.Node.FunduqKey(),
				Backoff: provider.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
				Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
				Agents: []provider.Agent{{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
					if err := sdkStart(ctx, r); err != nil {
						return err
					}
					return sdkReply(ctx, r, "hello")
				}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer runSDK(client)()
			before, _ := a.Door(signer.PublicKeyHex(), "echo", "", "before")
			a.WaitStatus(before, run.Completed)
			_, body := readyzBody(t, a)
			epoch, _ := body["epoch"].(float64)
			requestHandover(t, a)
			next.Eventually("a new epoch is taken", func() bool {
				code, body := readyzBody(t, next)
				e, _ := body["epoch"].(float64)
				return code == http.StatusOK && e > epoch
			})
			after, _ := next.Door(signer.PublicKeyHex(), "echo", "", "after")
			next.WaitStatus(after, run.Completed)
			for _, n := range nodes {
				if got := askTicket(t, n.URL, 4); got.status != http.StatusCreated {
					t.Errorf("%s after the handover: POST /tickets %d %s; want 201", n.Cfg.NodeID, got.status, got.body)
				}
				if _, body := readyzBody(t, n); body["takeover"] != "none" {
					t.Errorf("%s after the handover: /readyz takeover %v; want none", n.Cfg.NodeID, body["takeover"])
				}
			}
		})
	}
}
