package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// refusals is a slog.Handler that passes every record on and signals each
// "funduq refused register" record with its message: the outside barrier
// that funduq's error frame answered a register.
type refusals struct {
	slog.Handler
	seen chan string
}

func (r refusals) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "funduq refused register" {
		msg := ""
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "message" {
				msg = a.Value.String()
			}
			return true
		})
		select {
		case r.seen <- msg:
		default: // the test has what it waits for
		}
	}
	return r.Handler.Handle(ctx, rec)
}

func (r refusals) WithAttrs(as []slog.Attr) slog.Handler {
	return refusals{r.Handler.WithAttrs(as), r.seen}
}

func (r refusals) WithGroup(name string) slog.Handler {
	return refusals{r.Handler.WithGroup(name), r.seen}
}

// A register funduq refuses for a reason retrying cannot fix — past one of
// the broker's register limits, which the SDK cannot know before it asks,
// or from a key whose fingerprint another key holds — ends Run with an
// error wrapping provider.ErrRegisterRefused and naming funduq's reason,
// after that one refusal: no second ticket, handshake or register. Before,
// Run logged the refusal at ERROR and registered again for ever, so an
// author's process never exited while it served nothing; the fingerprint
// refusal, which names no setting, stayed so until the error frame carried
// a code (design.md §The provider wire, "Refusal codes").
func TestOutsideRegisterRefusedForGoodEndsRun(t *testing.T) {
	noop := func(context.Context, *provider.Run) error { return nil }
	for _, tc := range []struct {
		name    string
		setting string // what funduq's refusal names
		mut     func(*config.Broker)
		agents  []provider.Agent
		before  func(*testing.T, *nodetest.Harness, *identity.Signer)
	}{
		{"description", "FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES", nil,
			[]provider.Agent{{Name: "a", Description: strings.Repeat("d", 16<<10+1), Handler: noop}}, nil},
		{"agents", "FUNDUQ_MAX_AGENTS_PER_REGISTER", func(c *config.Broker) { c.MaxAgentsPerRegister = 2 },
			[]provider.Agent{{Name: "a", Handler: noop}, {Name: "b", Handler: noop}, {Name: "c", Handler: noop}}, nil},
		{"card", "FUNDUQ_MAX_AGENT_CARD_BYTES", func(c *config.Broker) { c.MaxAgentCardBytes = 64 },
			[]provider.Agent{{Name: "a", AgentCardExtra: json.RawMessage(`{"skills":"` + strings.Repeat("s", 64) + `"}`), Handler: noop}}, nil},
		{"metadata", "FUNDUQ_MAX_AGENT_CARD_BYTES", func(c *config.Broker) { c.MaxAgentCardBytes = 64 },
			[]provider.Agent{{Name: "a", Metadata: json.RawMessage(`{"m":"` + strings.Repeat("m", 64) + `"}`), Handler: noop}}, nil},
		{"register", "FUNDUQ_MAX_REGISTER_BYTES", func(c *config.Broker) { c.MaxRegisterBytes = 100 },
			[]provider.Agent{{Name: "a", Description: strings.Repeat("d", 60), Handler: noop}, {Name: "b", Description: strings.Repeat("d", 60), Handler: noop}}, nil},
		{"frame", "FUNDUQ_MAX_FRAME_BYTES", func(c *config.Broker) {
			c.MaxFrame, c.MaxEventBytes, c.MaxAgentDescriptionBytes = 32<<10, 16<<10, 64<<10
		}, []provider.Agent{{Name: "a", Description: strings.Repeat("d", 40<<10), Handler: noop}}, nil},
		{"fingerprint", "fingerprint is already held by another key", nil, []provider.Agent{{Name: "a", Handler: noop}},
			func(t *testing.T, h *nodetest.Harness, s *identity.Signer) {
				// Another key holds this key's fingerprint: no register
				// of this key can ever be recorded.
				if _, err := h.DB().Exec(t.Context(), `INSERT INTO providers (public_key, fingerprint) VALUES ($1, $2)`,
					strings.Repeat("0", 63)+"1", identity.Fingerprint(s.PublicKey())); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, tc.mut)
			s := outsideSigner(t, 0x61)
			if tc.before != nil {
				tc.before(t, h, s)
			}
			seen := make(chan string, 16)
			log := slog.New(refusals{slog.NewTextHandler(t.Output(), nil), seen})
			c, err := provider.New(outsideConfig(h, s, log, tc.agents...))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			// The safety net of a hung test, not an assertion: both
			// outcomes below are barriers that come in milliseconds.
			stuck := time.NewTimer(time.Minute)
			defer stuck.Stop()
			var first string
			select {
			case first = <-seen:
			case err := <-done:
				t.Fatalf("Run returned %v before funduq refused its register", err)
			case <-stuck.C:
				t.Fatal("funduq never refused the register")
			}
			if !strings.Contains(first, tc.setting) {
				t.Fatalf("funduq refused with %q, want it to name %s", first, tc.setting)
			}
			select {
			case err := <-done:
				if !errors.Is(err, provider.ErrRegisterRefused) || !strings.Contains(err.Error(), first) {
					t.Fatalf("Run = %v, want ErrRegisterRefused naming %q", err, first)
				}
			case again := <-seen:
				t.Fatalf("Run registered again after a refusal for good (refused again: %q)", again)
			case <-stuck.C:
				t.Fatal("Run neither returned nor registered again")
			}
			select {
			case <-c.Ready():
				t.Fatal("Ready closed though nothing was registered")
			default: // Run has returned: Ready can no longer close
			}
		})
	}
}

// The served-agents cap is a refusal of this moment (design.md §The
// provider wire, "Admission": "retry later"): Run goes on retrying with
// backoff, and registers once a place is free.
func TestOutsideRegisterAtTheServedCapIsRetried(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxServedAgents = 1 })
	noop := func(context.Context, *provider.Run) error { return nil }
	holder, err := provider.New(outsideConfig(h, outsideSigner(t, 0x62), nil, provider.Agent{Name: "first", Handler: noop}))
	if err != nil {
		t.Fatal(err)
	}
	stopHolder := serve(t, holder)

	seen := make(chan string, 64)
	log := slog.New(refusals{slog.NewTextHandler(t.Output(), nil), seen})
	c, err := provider.New(outsideConfig(h, outsideSigner(t, 0x63), log, provider.Agent{Name: "second", Handler: noop}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	// Refused twice: the second refusal is the barrier that Run did not
	// stop at the first.
	for i := range 2 {
		select {
		case msg := <-seen:
			if !strings.Contains(msg, "FUNDUQ_MAX_SERVED_AGENTS") {
				t.Fatalf("refusal %d = %q, want the served cap", i, msg)
			}
		case err := <-done:
			t.Fatalf("Run = %v at the served cap, want it to retry", err)
		}
	}
	if err := stopHolder(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("Run = %v, want it registered once a place freed", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v", err)
	}
}

// A client holding a run when a register is refused for good — the leader
// went away and the node that took over has a lower limit — finishes and
// reports the run first, on a link that registers nothing (as a replaced
// client does, D5), and only then Run returns ErrRegisterRefused.
func TestOutsideRegisterRefusedForGoodFinishesHeldRuns(t *testing.T) {
	grace := func(c *config.Broker) { c.ProviderGrace = 30 * time.Second; c.LinkGrace = 5 * time.Second }
	a := nodetest.Start(t, grace)
	b := a.PeerWith("node-b", func(c *config.Broker) { grace(c); c.MaxAgentDescriptionBytes = 8 }, nil)
	lb := nodetest.Balancer(t, a, b)
	s := outsideSigner(t, 0x64)
	release := make(chan struct{})
	seen := make(chan string, 16)
	log := slog.New(refusals{slog.NewTextHandler(t.Output(), nil), seen})
	cfg := outsideConfig(a, s, log, provider.Agent{Name: "slow", Description: "sixteen bytes!!!", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		<-release
		return finished(ctx, r)
	}})
	cfg.BaseURL = lb
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("Run = %v before registering on the first leader", err)
	}
	id, _ := a.Door(s.PublicKeyHex(), "slow", "", "go")
	a.Eventually("the run started", func() bool { return len(a.Events(id)) >= 1 })
	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	stuck := time.NewTimer(time.Minute)
	defer stuck.Stop()
	select {
	case msg := <-seen:
		if !strings.Contains(msg, "FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES") {
			t.Fatalf("b refused with %q", msg)
		}
	case err := <-done:
		t.Fatalf("Run = %v before b refused its register", err)
	case <-stuck.C:
		t.Fatal("b never refused the register")
	}
	close(release)
	b.Eventually("the run ends on b", func() bool { return b.Run(id).Status.Terminal() })
	if r := b.Run(id); r.Status != run.Completed {
		t.Fatalf("run %s (%s), want completed", r.Status, r.FailureReason)
	}
	select {
	case err := <-done:
		if !errors.Is(err, provider.ErrRegisterRefused) {
			t.Fatalf("Run = %v, want ErrRegisterRefused", err)
		}
	case <-stuck.C:
		t.Fatal("Run did not return once the held run was reported")
	}
}
