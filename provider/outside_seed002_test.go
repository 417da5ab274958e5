package provider_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// Seed 002 with our own SDK: misdeclared is "declining a run while
// claiming to have room", and a run failed for the provider's events
// "moves no counter that withdraws" (D18). A handler that emits past
// funduq's per-run event limit (which the SDK cannot know) has its run
// failed and its context cancelled (ErrRunNotHeld); until it returns, the
// SDK's one place is taken, and an offer read meanwhile is declined as
// full. funduq keeps that place for the run until the SDK's finish, so it
// offers the next run only then, and nothing is counted.
func TestOutsideSeed002SDKUnwindingARunOverTheEventLimitIsNotMisdeclared(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxEventsPerRun = 3 })
	s := outsideSigner(t, 0x5a)
	release := make(chan struct{})
	cancelled := make(chan error, 1)
	one := 1
	cfg := outsideConfig(h, s, nil, provider.Agent{Name: "chatty", Handler: func(ctx context.Context, r *provider.Run) error {
		if r.LastUserText() == "b" {
			if err := started(ctx, r); err != nil {
				return err
			}
			return finished(ctx, r)
		}
		for i := 0; ctx.Err() == nil; i++ { // past the limit: funduq fails the run
			_ = r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "tick", "value": i})
		}
		cancelled <- context.Cause(ctx)
		<-release // unwinding
		return ctx.Err()
	}})
	cfg.MaxConcurrentRuns = &one
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	var unwound sync.Once
	unwind := func() { unwound.Do(func() { close(release) }) }
	t.Cleanup(unwind) // before serve's stop: Run waits for the handler
	a, _ := h.Door(s.PublicKeyHex(), "chatty", "", "a")
	h.WaitStatus(a, run.Running)
	b, bThread := h.Door(s.PublicKeyHex(), "chatty", "", "b")
	h.Taken(b)
	if r := h.WaitStatus(a, run.Failed); r.FailureReason != string(run.ReasonEventLimit) {
		t.Fatalf("failed %q, want %s", r.FailureReason, run.ReasonEventLimit)
	}
	if cause := <-cancelled; !errors.Is(cause, provider.ErrRunNotHeld) {
		t.Fatalf("handler cancelled with %v, want ErrRunNotHeld", cause)
	}
	h.Settle()
	// A query's answer is written after any offer funduq wrote before it,
	// and the SDK reads its link in order: an offer of b has been answered
	// when the query returns, and the broker has read that answer once a
	// second query returns behind it.
	for range 2 {
		if _, err := c.Query(t.Context(), bThread, 1); err != nil {
			t.Fatal(err)
		}
		h.Settle()
	}
	if q := h.Quality(s.PublicKeyHex()); q.Misdeclared != 0 {
		t.Fatalf("the SDK declined while unwinding the failed run and was counted misdeclared %d", q.Misdeclared)
	}
	unwind()
	h.WaitStatus(b, run.Completed)
	h.Settle()
	if q := h.Quality(s.PublicKeyHex()); q.Misdeclared+q.Unanswered+q.AnsweredLate+q.Abandoned+q.Undelivered != 0 {
		t.Fatalf("an honest SDK was counted %+v", q)
	}
}
