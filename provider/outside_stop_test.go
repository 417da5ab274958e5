package provider_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// The provider shuts down (Run's context ends) at a seeded moment while
// runs stream, their handlers honouring ctx: each run either completed or
// ended with the handler's own end, none is left to funduq
// (provider_left_holding_it) and nothing is counted against the key. A
// run still queued when the agent went out of service fails
// no_provider_took_it once the unserved window ends; one accepted just as
// the shutdown began, before its handler started, ends with the SDK's
// RUN_ERROR "the provider shut down before this run started".
func TestOutsideShutdownAtARandomMoment(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { shutdownAtRandom(t, seed) })
	}
}

func shutdownAtRandom(t *testing.T, seed uint64) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0xc0+byte(seed))
	const runs, each = 6, 30
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "s", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		for i := range each {
			if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "n", "value": i}); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	stop := serve(t, c)
	ids := make([]string, runs)
	for i := range ids {
		ids[i], _ = h.Door(s.PublicKeyHex(), "s", "", fmt.Sprint("go ", i))
	}
	rng := rand.New(rand.NewPCG(seed, 0x570))
	time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	var late []string
	// A run still queued when the agent went out of service waits for a
	// provider until FUNDUQ_UNSERVED_TIMEOUT, on the node's fake clock.
	for _, id := range ids {
		if st := h.Run(id).Status; st == run.Queued || st == run.Offering {
			late = append(late, id)
		}
	}
	h.Advance(h.Cfg.UnservedTimeout + h.Cfg.DeliverTimeout)
	t.Logf("%d runs queued or offered when Run returned", len(late))
	counts := map[string]int{}
	for _, id := range ids {
		h.Eventually("run "+id+" ends", func() bool { return h.Run(id).Status.Terminal() })
		r := h.Run(id)
		counts[string(r.Status)+" "+r.FailureReason]++
		if r.Status != run.Completed && r.Status != run.Failed {
			t.Errorf("run %s: %s", id, r.Status)
		}
		if r.FailureReason == string(run.ReasonProviderLeftHoldingIt) {
			t.Errorf("run %s: %s", id, r.FailureReason)
		}
	}
	t.Logf("%v", counts)
	h.Settle()
	if q := h.Quality(s.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 || q.Misdeclared != 0 {
		t.Errorf("quality %+v", q)
	}
}
