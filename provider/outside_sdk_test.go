package provider_test

// Tests of the SDK used from the outside, as an agent author would, against
// a real broker node (broker-node/nodetest): only the exported API, the
// real wire, a real PostgreSQL and Redis.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/internal/syncbuf"
	"github.com/funduq/funduq-go/provider"
)

func outsideSigner(t *testing.T, b byte) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(b))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve runs c until the returned stop is called; stop returns Run's error.
func serve(t *testing.T, c *provider.Client) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("Run returned before registering: %v", err)
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func started(ctx context.Context, r *provider.Run) error {
	return r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID})
}

func finished(ctx context.Context, r *provider.Run) error {
	return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
}

func outsideConfig(h *nodetest.Harness, s *identity.Signer, log *slog.Logger, agents ...provider.Agent) provider.Config {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return provider.Config{BaseURL: h.URL, Signer: s, FunduqKey: h.Node.FunduqKey(), Logger: log,
		Backoff: provider.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}, Agents: agents}
}

// Many goroutines of one run emit at once: every event is stored once, the
// seq order is the order Emit returned in for each goroutine, and the run
// completes with nothing counted against the key.
func TestOutsideConcurrentEmitOfOneRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0x51)
	const workers, each = 8, 25
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "fan", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "tick", "value": map[string]int{"w": w, "i": i}}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return err
		}
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	id, _ := h.Door(s.PublicKeyHex(), "fan", "", "go")
	h.WaitStatus(id, run.Completed)
	evs := h.Events(id)
	if len(evs) != workers*each+2 {
		t.Fatalf("%d events stored, want %d", len(evs), workers*each+2)
	}
	next := make(map[int]int)
	for _, e := range evs[1 : len(evs)-1] {
		v := e["value"].(map[string]any)
		w, i := int(v["w"].(float64)), int(v["i"].(float64))
		if next[w] != i {
			t.Fatalf("worker %d: event %d stored where %d was due", w, i, next[w])
		}
		next[w]++
	}
	if q := h.Quality(s.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 {
		t.Fatalf("quality %+v", q)
	}
}

// A handler that keeps its Run and emits after it returned is told
// ErrRunFinished, and nothing more is stored.
func TestOutsideEmitAfterReturn(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0x52)
	kept := make(chan *provider.Run, 1)
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "a", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		kept <- r
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	id, _ := h.Door(s.PublicKeyHex(), "a", "", "go")
	h.WaitStatus(id, run.Completed)
	r := <-kept
	if err := r.Emit(t.Context(), map[string]any{"type": "CUSTOM", "name": "late", "value": 1}); !errors.Is(err, provider.ErrRunFinished) {
		t.Fatalf("Emit after return = %v, want ErrRunFinished", err)
	}
	if n := len(h.Events(id)); n != 2 {
		t.Fatalf("%d events stored, want 2", n)
	}
}

// An event emitted after the run's terminal event (RUN_FINISHED or
// RUN_ERROR) is one funduq refuses ("the run already reported its end"),
// and its refusal used to cancel the handler's context with ErrRunNotHeld
// although funduq holds the run and completes it. Emit says so at the call
// instead, as it does for an invalid event, and sends nothing.
func TestOutsideEmitAfterTerminalEvent(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0x53)
	got := make(chan error, 1)
	var logs syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	c, err := provider.New(outsideConfig(h, s, log, provider.Agent{Name: "a", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		if err := finished(ctx, r); err != nil {
			return err
		}
		got <- r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "late", "value": 1})
		return nil
	}}))
	if err != nil {
		t.Fatal(err)
	}
	stop := serve(t, c)
	id, _ := h.Door(s.PublicKeyHex(), "a", "", "go")
	emitErr := <-got
	h.WaitStatus(id, run.Completed)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(h.Events(id)); n != 2 {
		t.Fatalf("%d events stored, want 2", n)
	}
	if !errors.Is(emitErr, provider.ErrRunFinished) {
		t.Errorf("Emit after RUN_FINISHED = %v, want ErrRunFinished", emitErr)
	}
	if bytes.Contains(logs.Bytes(), []byte("already reported its end")) {
		t.Errorf("the late event was sent and refused:\n%s", logs.String())
	}
}
