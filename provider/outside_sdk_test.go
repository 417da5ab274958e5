package provider_test

// Tests of the SDK used from the outside, as an agent author would, against
// a real broker node (broker-node/nodetest): only the exported API, the
// real wire, a real PostgreSQL and Redis.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
		log = h.Log.With("side", "sdk")
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

// What the client logs, at every level, through a failed run and a lost
// node, names the key (provider_key) and never its seed.
func TestOutsideLogsHoldNoSecret(t *testing.T) {
	h := nodetest.Start(t, nil)
	seed := nodetest.SeedHex(0x54)
	s := outsideSigner(t, 0x54)
	var logs syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := provider.New(outsideConfig(h, s, log, provider.Agent{Name: "a", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		return errors.New("it failed")
	}}))
	if err != nil {
		t.Fatal(err)
	}
	stop := serve(t, c)
	id, _ := h.Door(s.PublicKeyHex(), "a", "", "go")
	h.WaitStatus(id, run.Failed)
	h.Shutdown()
	// A failed reconnect is logged with the URL it tried and its error.
	h.Eventually("a failed reconnect is logged", func() bool { return bytes.Contains(logs.Bytes(), []byte("reconnecting")) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := logs.Bytes()
	if bytes.Contains(out, []byte(seed)) {
		t.Errorf("the logs hold the key's seed:\n%s", out)
	}
	for _, rec := range logs.Records() {
		if rec["provider_key"] != s.PublicKeyHex() {
			t.Errorf("a record without provider_key: %v", rec)
		}
		if rec["run_id"] != nil && rec["thread_id"] == nil {
			t.Errorf("a record naming a run without its thread: %v", rec)
		}
	}
}

// A BaseURL carrying userinfo (a proxy's basic auth) can never connect:
// the WebSocket dialer refuses such a URL ("malformed ws or wss URL"), so
// Run retried forever, logging the password with every attempt. New
// refuses it, naming the field without repeating the password.
func TestOutsideBaseURLWithUserinfoIsRefusedByNew(t *testing.T) {
	const password = "pr0xy-s3cret"
	s := outsideSigner(t, 0x55)
	h := func(context.Context, *provider.Run) error { return nil }
	for _, raw := range []string{
		"http://agent:" + password + "@127.0.0.1:1",
		"https://agent:" + password + "@funduq.example/prefix",
		"ftp://agent:" + password + "@funduq.example",
		"http://agent:" + password + "@funduq.example/%zz",
	} {
		_, err := provider.New(provider.Config{BaseURL: raw, Signer: s, Agents: []provider.Agent{{Name: "a", Handler: h}}})
		if err == nil {
			t.Errorf("New(%q) = nil, want an error", raw)
			continue
		}
		if !strings.Contains(err.Error(), "BaseURL") || strings.Contains(err.Error(), password) {
			t.Errorf("New(%q) = %v, want an error naming BaseURL without the password", raw, err)
		}
	}
}

// BaseURL as authors write it: a trailing slash or a query does not keep
// the client from registering with a real node.
func TestOutsideBaseURLShapesConnect(t *testing.T) {
	h := nodetest.Start(t, nil)
	for i, suffix := range []string{"/", "?from=env", "/#frag"} {
		s := outsideSigner(t, byte(0x60+i))
		cfg := outsideConfig(h, s, nil, provider.Agent{Name: "a", Handler: func(context.Context, *provider.Run) error { return nil }})
		cfg.BaseURL = h.URL + suffix
		c, err := provider.New(cfg)
		if err != nil {
			t.Fatalf("New(%q): %v", cfg.BaseURL, err)
		}
		stop := serve(t, c)
		if err := stop(); err != nil {
			t.Fatalf("%q: Run = %v", cfg.BaseURL, err)
		}
	}
}

// An author who logs or prints the Config (a common debugging line) does
// not print the key's seed: not with fmt's verbs, not through slog.
func TestOutsideConfigPrintsNoSeed(t *testing.T) {
	seed := nodetest.SeedHex(0x5e)
	s := outsideSigner(t, 0x5e)
	cfg := provider.Config{BaseURL: "http://127.0.0.1:1", Signer: s,
		Agents: []provider.Agent{{Name: "a", Handler: func(context.Context, *provider.Run) error { return nil }}}}
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "cfg", cfg, "client", c)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "cfg", cfg, "client", c)
	out := logs.String() + fmt.Sprintf("%v %+v %#v %v %+v", cfg, cfg, cfg, c, c)
	// The seed's hex, and its bytes as fmt prints a slice.
	if strings.Contains(out, seed) || strings.Contains(out, seed[:16]) {
		t.Fatalf("the seed was printed:\n%s", out)
	}
	if strings.Contains(out, fmt.Sprint(seedBytes(seed))[1:40]) {
		t.Fatalf("the seed's bytes were printed:\n%s", out)
	}
}

func seedBytes(h string) []byte {
	b := make([]byte, len(h)/2)
	for i := range b {
		fmt.Sscanf(h[2*i:2*i+2], "%02x", &b[i])
	}
	return b
}
