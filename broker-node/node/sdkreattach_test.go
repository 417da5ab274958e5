package node_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
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
	"github.com/funduq/funduq-go/core/store"
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
	// dropUp and dropDown swallow what passes towards the broker or
	// towards the provider: the sender's writes succeed, nothing arrives.
	dropUp, dropDown bool
	dropped          []byte // what dropUp swallowed
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
			go func() { defer p.wg.Done(); p.pipe(up, c, true); _ = up.Close() }()
			go func() { defer p.wg.Done(); p.pipe(c, up, false); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

// pipe copies src to dst, swallowing what the drop flag of its direction
// says to.
func (p *cutProxy) pipe(dst, src net.Conn, up bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			drop := p.dropDown
			if up {
				drop = p.dropUp
				if drop {
					p.dropped = append(p.dropped, buf[:n]...)
				}
			}
			p.mu.Unlock()
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// swallowed reports whether a whole WebSocket frame dropUp swallowed
// contains s (a provider's frames are masked: each is unmasked to look).
func (p *cutProxy) swallowed(s string) bool {
	p.mu.Lock()
	b := bytes.Clone(p.dropped)
	p.mu.Unlock()
	for len(b) >= 2 {
		n, at := uint64(b[1]&0x7f), 2
		switch n {
		case 126:
			if len(b) < 4 {
				return false
			}
			n, at = uint64(binary.BigEndian.Uint16(b[2:])), 4
		case 127:
			if len(b) < 10 {
				return false
			}
			n, at = binary.BigEndian.Uint64(b[2:]), 10
		}
		var mask []byte
		if b[1]&0x80 != 0 {
			if len(b) < at+4 {
				return false
			}
			mask, at = b[at:at+4], at+4
		}
		if uint64(len(b)-at) < n {
			return false
		}
		payload := b[at : at+int(n)]
		for i := range payload {
			if mask != nil {
				payload[i] ^= mask[i%4]
			}
		}
		if bytes.Contains(payload, []byte(s)) {
			return true
		}
		b = b[at+int(n):]
	}
	return false
}

func (p *cutProxy) drop(up, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropUp, p.dropDown = up, down
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
	p.dropUp, p.dropDown = false, false
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

// pausingSDK is our SDK serving "echo" through px: its first round emits
// RUN_STARTED, waits for pause, then finishes paused on an interrupt; a
// later round (the run reopened by an answer) completes.
func pausingSDK(t *testing.T, h *nodetest.Harness, px *cutProxy, seed byte) (c *provider.Client, signer *identity.Signer, started chan string, pause chan struct{}) {
	t.Helper()
	signer, _ = identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	started = make(chan string, 1)
	pause = make(chan struct{})
	rounds := 0
	c, err := provider.New(provider.Config{
		BaseURL: "http://" + px.ln.Addr().String(), Signer: signer, FunduqKey: h.Node.FunduqKey(),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backoff: provider.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Agents: []provider.Agent{{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
			rounds++ // one run, its rounds one after the other
			if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
				return err
			}
			if rounds > 1 {
				return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
			}
			started <- r.ID
			<-pause
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID,
				"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "int_1", "reason": "confirm"}}}})
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, signer, started, pause
}

// registeredAgain waits until the key serves its agent on a new link.
func registeredAgain(h *nodetest.Harness, key string) {
	h.Eventually("the SDK is back and registered", func() bool {
		for _, pv := range h.Node.Broker.Snapshot().Providers {
			if pv.Key == key && len(pv.Agents) == 1 {
				return true
			}
		}
		return false
	})
	h.Settle()
}

// Our SDK's paused round is lost with its link: its RUN_FINISHED
// (interrupt) and finish were written but never reached funduq, which
// holds the run for the lost link. On the next link the SDK resends the
// round before it registers; funduq re-adopts the run from it and the run
// pauses, input-required, on the interrupt, with nothing counted against
// the provider (design.md D7).
func TestSDKResendsALostPausedRound(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	u, _ := url.Parse(h.URL)
	px := newCutProxy(t, u.Host)
	c, signer, started, pause := pausingSDK(t, h, px, 0xec)
	stop := runSDK(c)
	defer stop()
	id, _ := h.Door(signer.PublicKeyHex(), "echo", "", "hi")
	<-started
	h.Eventually("RUN_STARTED stored", func() bool { return len(h.Events(id)) == 1 })
	px.drop(true, false)
	close(pause)
	h.Eventually("the paused round's finish written and lost", func() bool { return px.swallowed(`"type":"finish"`) })
	px.cut()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Eventually("the run is held for the key", func() bool { return h.Node.Broker.Held()["lostHeld.lanes"] == 1 })
	h.Settle()
	px.open()
	registeredAgain(h, signer.PublicKeyHex())
	for range 3 {
		h.Advance(6 * time.Second) // past both link graces
	}
	if r := h.Run(id); r.Status != run.InputRequired {
		t.Fatalf("run %s (%s) after the SDK came back, want input-required", r.Status, r.FailureReason)
	}
	evs := h.Events(id)
	if len(evs) != 2 || evs[1]["outcome"] == nil {
		t.Fatalf("stored %v, want RUN_STARTED and the interrupt", evs)
	}
	if q := h.Quality(signer.PublicKeyHex()); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// Our SDK's paused round reached funduq, but the SDK never heard it
// confirmed (funduq's answers were lost), and the caller answered while
// the link was down. The SDK's resend of the old round on its next link
// is refused (no link of the key serves the agent yet) and taken quietly;
// the answer is not swallowed: the new round is offered and run, and the
// record holds the paused round once.
func TestSDKResentPausedRoundAfterAnAnswer(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	u, _ := url.Parse(h.URL)
	px := newCutProxy(t, u.Host)
	c, signer, started, pause := pausingSDK(t, h, px, 0xed)
	stop := runSDK(c)
	defer stop()
	id, thread := h.Door(signer.PublicKeyHex(), "echo", "", "hi")
	<-started
	h.Eventually("RUN_STARTED stored", func() bool { return len(h.Events(id)) == 1 })
	px.drop(false, true) // the SDK hears no confirmation
	close(pause)
	h.WaitStatus(id, run.InputRequired)
	px.cut()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	if _, err := h.Store.ReopenRun(t.Context(), store.Reopen{RunID: id, RunInput: []byte(fmt.Sprintf(
		`{"threadId":%q,"runId":%q,"messages":[],"tools":[],"context":[],"forwardedProps":{},"resume":[{"interruptId":"int_1","payload":"yes"}]}`,
		thread, id))}); err != nil {
		t.Fatal(err)
	}
	h.Taken(id)
	px.open()
	registeredAgain(h, signer.PublicKeyHex())
	h.Eventually("the answered round ends", func() bool { return h.Run(id).Status.Terminal() })
	if r := h.Run(id); r.Status != run.Completed {
		t.Fatalf("run %s (%s) after the answer, want completed", r.Status, r.FailureReason)
	}
	h.Settle()
	evs := h.Events(id)
	interrupts := 0
	for _, e := range evs {
		if e["outcome"] != nil {
			interrupts++
		}
	}
	if len(evs) != 4 || interrupts != 1 {
		t.Fatalf("stored %v, want the paused round once, then the answered round", evs)
	}
	if q := h.Quality(signer.PublicKeyHex()); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}
