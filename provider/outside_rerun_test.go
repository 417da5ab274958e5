package provider_test

import (
	"context"
	"errors"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// A handler that ignores its context at shutdown: the client ends its run
// (RUN_ERROR naming the shutdown, the 5 s rule), and what the handler emits
// afterwards is refused with ErrRunFinished, not sent; Run returns nil once
// the handler returns. The same Client then runs again and serves as new:
// the next run is handled once and completes.
func TestOutsideStubbornHandlerThenRunAgain(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0x57)
	first := make(chan string, 1)
	release := make(chan struct{})
	lateEmit := make(chan error, 1)
	calls := make(chan string, 4)
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "a", Handler: func(ctx context.Context, r *provider.Run) error {
		calls <- r.ID
		if err := started(ctx, r); err != nil {
			return err
		}
		if r.LastUserText() == "stubborn" {
			first <- r.ID
			<-release // ignores ctx
			lateEmit <- r.Emit(context.Background(), map[string]any{"type": "CUSTOM", "name": "late", "value": 1})
			return errors.New("late failure")
		}
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- c.Run(ctx) }()
	<-c.Ready()
	id1, _ := h.Door(s.PublicKeyHex(), "a", "", "stubborn")
	<-first
	h.Eventually("RUN_STARTED stored", func() bool { return len(h.Events(id1)) == 1 })
	cancel()
	r1 := h.WaitStatus(id1, run.Failed)
	close(release)
	if err := <-lateEmit; !errors.Is(err, provider.ErrRunFinished) {
		t.Errorf("Emit after the client ended the run = %v, want ErrRunFinished", err)
	}
	if err := <-returned; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if r1.FailureReason == string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("first run failed %s", r1.FailureReason)
	}

	// Ready was closed by the first Run ("the first time"): the second
	// one's registration shows in Connected.
	stop := serve(t, c)
	h.Eventually("the second Run registers", c.Connected)
	id2, _ := h.Door(s.PublicKeyHex(), "a", "", "plain")
	h.WaitStatus(id2, run.Completed)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if evs := h.Events(id1); len(evs) != 2 || evs[1]["type"] != "RUN_ERROR" {
		t.Errorf("first run stored %v, want RUN_STARTED and the shutdown's RUN_ERROR", evs)
	}
	close(calls)
	n := map[string]int{}
	for id := range calls {
		n[id]++
	}
	if n[id1] != 1 || n[id2] != 1 || len(n) != 2 {
		t.Errorf("handler calls %v", n)
	}
	if q := h.Quality(s.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 {
		t.Errorf("quality %+v", q)
	}
}

// Run with a context that already ended returns nil at once, without
// connecting; the Client still serves on a later Run.
func TestOutsideRunWithAnEndedContext(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0x58)
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "a", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ended); err != nil {
		t.Fatalf("Run(ended ctx) = %v", err)
	}
	select {
	case <-c.Ready():
		t.Fatal("Ready closed by a Run that never connected")
	default:
	}
	serve(t, c)
	h.Eventually("registered", c.Connected)
	id, _ := h.Door(s.PublicKeyHex(), "a", "", "hi")
	h.WaitStatus(id, run.Completed)
}
