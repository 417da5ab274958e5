package provider_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// The leader goes away while several runs are mid-stream (at a seeded
// moment), and the standby takes over behind a load balancer: every run
// completes on the new leader, each handler ran once, each event is stored
// once in order, nothing is counted against the key.
func TestOutsideFailoverMidStream(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { failoverMidStream(t, seed) })
	}
}

func failoverMidStream(t *testing.T, seed uint64) {
	grace := func(c *config.Broker) { c.ProviderGrace = 30 * time.Second; c.LinkGrace = 5 * time.Second }
	a := nodetest.Start(t, grace)
	b := a.PeerWith("node-b", grace, nil)
	lb := nodetest.Balancer(t, a, b)
	s := outsideSigner(t, 0x90+byte(seed))
	const runs, each = 4, 40
	var mu sync.Mutex
	starts := map[string]int{}
	cfg := outsideConfig(a, s, nil, provider.Agent{Name: "stream", Handler: func(ctx context.Context, r *provider.Run) error {
		mu.Lock()
		starts[r.ID]++
		mu.Unlock()
		if err := started(ctx, r); err != nil {
			return err
		}
		for i := range each {
			if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "n", "value": i}); err != nil {
				return err
			}
			time.Sleep(2 * time.Millisecond)
		}
		return finished(ctx, r)
	}})
	cfg.BaseURL = lb
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	ids := make([]string, runs)
	for i := range ids {
		ids[i], _ = a.Door(s.PublicKeyHex(), "stream", "", fmt.Sprint("go ", i))
	}
	// Every run under way on a, then a goes away at a seeded moment.
	for _, id := range ids {
		a.Eventually("run "+id+" streaming", func() bool { return len(a.Events(id)) >= 1 })
	}
	rng := rand.New(rand.NewPCG(seed, 0xfa11))
	time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
	live := 0
	for _, id := range ids {
		if !a.Run(id).Status.Terminal() {
			live++
		}
	}
	t.Logf("%d of %d runs open when the leader went away", live, runs)
	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	for _, id := range ids {
		b.Eventually("run "+id+" ends", func() bool { return b.Run(id).Status.Terminal() })
	}
	want := []string{"RUN_STARTED<nil>"}
	for i := range each {
		want = append(want, fmt.Sprint("CUSTOM", i))
	}
	want = append(want, "RUN_FINISHED<nil>")
	for _, id := range ids {
		if r := b.Run(id); r.Status != run.Completed {
			t.Errorf("run %s: %s (%s), want completed", id, r.Status, r.FailureReason)
		}
		var got []string
		for _, e := range b.Events(id) {
			got = append(got, fmt.Sprint(e["type"], e["value"]))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("run %s stored\n%v\nwant\n%v", id, got, want)
		}
		startedOnce(t, &mu, starts, id)
	}
	if q := b.Quality(s.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 {
		t.Errorf("quality %+v", q)
	}
}
