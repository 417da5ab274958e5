package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/wire"
)

// stallFirstLink makes f stop reading its first link once it answered
// register, as a broker applying backpressure does, until resume is called;
// with ping it pings the client all along. The link is handed over
// on the returned channel.
func stallFirstLink(t *testing.T, f *fakeFunduq, ping bool) (first <-chan *peer, resume func()) {
	ch := make(chan *peer, 1)
	stalled := make(chan struct{})
	var resumed bool
	resume = func() {
		if !resumed {
			resumed = true
			close(stalled)
		}
	}
	t.Cleanup(resume) // before f closes its links (cleanups run last first)
	f.setHooks(func(f *fakeFunduq) {
		f.afterRegister = func(n int, p *peer) bool {
			if n != 1 {
				return false
			}
			names := make([]string, 0, len(p.register.Agents))
			for _, a := range p.register.Agents {
				names = append(names, a.Name)
			}
			if err := p.write(wire.Registered{Type: wire.TypeRegistered, Names: names}); err != nil {
				return true
			}
			ch <- p
			if ping {
				// For as long as the link lives, as a broker's writer does:
				// once funduq reads again, the client's pongs come only after
				// what the sockets buffered.
				go func() {
					for {
						time.Sleep(20 * time.Millisecond)
						if p.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(guard)) != nil {
							return
						}
					}
				}()
			}
			<-stalled
			_ = p.conn.SetReadDeadline(time.Time{})
			return true
		}
	})
	return ch, resume
}

// streamer emits n events of 64 KiB each, far more than the sockets buffer.
func streamer(n int) Agent {
	pad := strings.Repeat("x", 64<<10)
	return Agent{Name: "stream", Handler: func(ctx context.Context, r *Run) error {
		for i := range n {
			if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "tick", "value": i, "pad": pad}); err != nil {
				return err
			}
		}
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
	}}
}

// A funduq that stops reading the link but keeps pinging is alive: the
// client's writes wait (StallTimeout) and its unanswered pings do not drop
// the link, however many pong waits pass. Once funduq reads again, every
// frame arrives on the same link.
func TestStalledLinkKeptWhileFunduqPings(t *testing.T) {
	const n = 150
	f := newFakeFunduq(t)
	first, resume := stallFirstLink(t, f, true)
	cfg := baseConfig(t, f, streamer(n))
	// A 2.5 s pong wait: on a loaded machine (CI runs every package's
	// tests at once under -race) a 1 s wait timed out after the resume
	// while the stalled backlog was read.
	cfg.PingInterval = time.Second
	c, _ := startClient(t, cfg)
	p := <-first
	p.send(t, runFrame("r1", "stream", "t1", "go"))

	for range 200 { // 10 s: four pong waits
		time.Sleep(50 * time.Millisecond)
		if !c.Connected() || f.conns() != 1 {
			t.Fatalf("the client dropped a link whose funduq pings (connected %v, %d links)", c.Connected(), f.conns())
		}
	}
	c.mu.Lock()
	waiting := len(c.outbox)
	c.mu.Unlock()
	if waiting == 0 {
		t.Fatal("every frame was written while funduq read none: the writer never stalled")
	}
	t.Logf("%d frames waiting while funduq did not read", waiting)

	resume()
	p.expectAck(t, "r1")
	for seq := int64(1); seq <= n+1; seq++ {
		p.expectEvent(t, "r1", seq)
	}
	p.expectFinish(t, "r1")
	if k := f.conns(); k != 1 {
		t.Fatalf("%d links, want 1", k)
	}
}

// A funduq that stops reading and sends nothing either is taken for gone
// after the pong wait, even while a write is stalled: the link is dropped
// (which ends the write) and the client reconnects.
func TestStalledLinkDroppedWhenFunduqIsSilent(t *testing.T) {
	f := newFakeFunduq(t)
	first, _ := stallFirstLink(t, f, false)
	cfg := baseConfig(t, f, streamer(150))
	cfg.PingInterval = 100 * time.Millisecond
	cfg.StallTimeout = time.Hour
	startClient(t, cfg)
	p := <-first
	p.send(t, runFrame("r1", "stream", "t1", "go"))

	second := f.registeredPeer(t)
	if second.n != 2 {
		t.Fatalf("next link is %d, want 2", second.n)
	}
}
