package a2a_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// Honest callers sending on one context at once queue their tasks behind
// each other (D2); each admission takes the thread's row lock for its two
// round trips. The per-step bound (door.Step, design.md §Doors under
// storage faults) is for a storage that does not answer, not for a caller
// waiting its turn behind seven others: none of them is refused, over many
// rounds, and likewise while the provider stores a long burst of events on
// the context's running task.
func TestOutsideCallersCrowdingOneContextAreAllAdmitted(t *testing.T) {
	const callers, rounds = 8, 12
	for _, burst := range []bool{false, true} {
		t.Run(fmt.Sprintf("burst=%v", burst), func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			c := newClient(t, startDoor(t, h, func(o *a2a.Options) { o.Limits.MaxQueuedPerThread = callers*rounds + 8 }), p.Key, "echo", "")
			first := c.ok("message/send", map[string]any{"message": c.message("m0", "hi", nil),
				"configuration": map[string]any{"blocking": false}})
			ctxID := first["contextId"]
			f := p.Offer()
			stop := func() {}
			if burst {
				// The context's first task is served, its provider storing
				// a burst of events while the callers send.
				p.Accept(f.RunID)
				p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
				p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				delta := strings.Repeat("x", 4000)
				go func() {
					defer close(done)
					for i := 0; i < 50000 && ctx.Err() == nil; i++ {
						p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"`+delta+`"}`)
					}
				}()
				// The burst is under way before the first round (a barrier),
				// and still going after the last (checked below).
				h.Eventually("the burst's events are being stored", func() bool {
					var n int
					err := h.Store.Pool().QueryRow(context.Background(),
						`SELECT count(*) FROM run_events WHERE run_id = $1`, f.RunID).Scan(&n)
					return err == nil && n > 10
				})
				stop = func() {
					select {
					case <-done:
						t.Error("the burst ended before the callers' last round: it did not overlap them all")
					default:
					}
					cancel()
					<-done
				}
			}
			var refused []string
			for r := range rounds {
				bodies := make([]string, callers)
				for i := range bodies {
					bodies[i] = c.body("message/send", map[string]any{
						"message":       c.message(fmt.Sprintf("m%d-%d", r, i), "again", map[string]any{"contextId": ctxID}),
						"configuration": map[string]any{"blocking": false}})
				}
				answers := make([]rpcResp, callers)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range callers {
					wg.Go(func() { <-start; answers[i] = c.rawCall(bodies[i], nil) })
				}
				close(start)
				wg.Wait()
				for i, a := range answers {
					if a.Error != nil || a.Result["id"] == nil {
						refused = append(refused, fmt.Sprintf("round %d caller %d: HTTP %d %+v", r, i, a.Status, a.Error))
					}
				}
			}
			stop()
			for _, s := range refused {
				t.Error(s)
			}
			if n := len(refused); n > 0 {
				t.Errorf("%d of %d honest sends on one context refused", n, callers*rounds)
			}
			var queued int
			if err := h.Store.Pool().QueryRow(context.Background(),
				`SELECT count(*) FROM runs WHERE thread_id = $1 AND status IN ('queued', 'offering')`, *f.ThreadID).Scan(&queued); err != nil {
				t.Fatal(err)
			}
			want := callers*rounds - len(refused)
			if !burst {
				want++ // the first task, offered and held
			}
			if queued != want {
				t.Errorf("%d tasks waiting on the context; want %d", queued, want)
			}
		})
	}
}
