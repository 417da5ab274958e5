package a2a_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/internal/crowdtest"
)

// Honest callers sending on one context at once queue their tasks behind
// each other (D2); each admission takes the thread's row lock for its two
// round trips. The per-step bound (door.Step, design.md §Doors under
// storage faults) is for a storage that does not answer, not for a caller
// waiting its turn behind seven others: none of them is refused, over many
// rounds, and likewise while the provider stores a long burst of events on
// the context's running task. The step bound is pinned (startPinnedDoor):
// how long eight admissions in a row take is the machine's speed, not the
// door's behaviour; what is refused whatever the speed (a lock wait cut
// short, a deadlock between callers, a queue miscounted) is the claim.
func TestOutsideCallersCrowdingOneContextAreAllAdmitted(t *testing.T) {
	const callers, rounds = 8, 12
	for _, burst := range []bool{false, true} {
		t.Run(fmt.Sprintf("burst=%v", burst), func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			c := newClient(t, startPinnedDoor(t, h, func(o *a2a.Options) { o.Limits.MaxQueuedPerThread = callers*rounds + 8 }), p.Key, "echo", "")
			first := c.ok("message/send", map[string]any{"message": c.message("m0", "hi", nil),
				"configuration": map[string]any{"blocking": false}})
			ctxID := first["contextId"]
			f := p.Offer()
			stop := func() {}
			if burst {
				// The context's first task is served, its provider storing
				// a burst of events while the callers send.
				// The burst is under way before the first round (a barrier),
				// and still going after the last (checked below).
				stop = crowdtest.Burst(t, h, p, f.RunID, *f.ThreadID)
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
				failed := make([]error, callers)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range callers {
					wg.Go(func() { <-start; answers[i], failed[i] = c.tryRawCall(bodies[i], nil) })
				}
				close(start)
				wg.Wait()
				for i, a := range answers {
					if failed[i] != nil {
						refused = append(refused, fmt.Sprintf("round %d caller %d: %v", r, i, failed[i]))
					} else if a.Error != nil || a.Result["id"] == nil {
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
			queued := crowdtest.Waiting(t, h, *f.ThreadID)
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
