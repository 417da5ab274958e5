package node_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// cutProxy forwards TCP connections to target until cut drops every one
// open: both sides see the connection end with no close frame, a network
// failure.
type cutProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	closed bool // cut and not yet let back: new connections are dropped
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				_ = c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

// cut drops every open connection and each new one until open.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) open() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = false
}

// Our SDK as the provider: its link is cut (no close frame) while it runs
// a run, it reconnects, registers and acks the run it holds. The run is
// re-adopted: it waits out both link graces and completes, and nothing
// counts against the provider.
func TestSDKReattachCarriesItsRunOn(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	u, _ := url.Parse(h.URL)
	px := newCutProxy(t, u.Host)
	signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xeb))
	started := make(chan string, 1)
	release := make(chan struct{})
	c, err := provider.New(provider.Config{
		BaseURL: "http://" + px.ln.Addr().String(), Signer: signer, FunduqKey: h.Node.FunduqKey(),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backoff: provider.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Agents: []provider.Agent{{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
			if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
				return err
			}
			started <- r.ID
			<-release
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSDK(c)
	defer stop()
	defer close(release)
	id, _ := h.Door(signer.PublicKeyHex(), "echo", "", "hi")
	<-started
	h.Eventually("RUN_STARTED stored", func() bool { return len(h.Events(id)) == 1 })
	px.cut()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Eventually("the run is held for the key", func() bool { return h.Node.Broker.Held()["lostHeld.lanes"] == 1 })
	h.Settle()
	h.Advance(2 * time.Second) // inside the grace
	px.open()
	h.Eventually("the SDK is back and holds the run again", func() bool {
		held := h.Node.Broker.Held()
		return h.Node.Broker.Snapshot().Links == 1 && held["lostHeld.lanes"] == 0 && held["byLink.lanes"] == 1
	})
	h.Settle()
	h.Advance(10 * time.Second) // past both link graces
	h.Settle()
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("run %s (%s) after the SDK re-attached, want running", r.Status, r.FailureReason)
	}
	release <- struct{}{}
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if q := h.Quality(signer.PublicKeyHex()); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}
