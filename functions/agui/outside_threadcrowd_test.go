package agui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/internal/crowdtest"
)

// Honest callers posting on one thread at once queue their runs behind
// each other (D2); each admission takes the thread's row lock for its two
// round trips. The per-step bound (door.Step, design.md §Doors under
// storage faults) is for a storage that does not answer, not for a caller
// waiting its turn behind seven others: none of them is refused 503, over
// many rounds, and likewise while the provider stores a long burst of
// events on the thread's running run. The step bound is pinned
// (startPinnedDoor): how long eight admissions in a row take is the
// machine's speed, not the door's behaviour; what is refused whatever the
// speed (a lock wait cut short, a deadlock between callers, a queue
// miscounted) is the claim.
func TestOutsideCallersCrowdingOneThreadAreAllAdmitted(t *testing.T) {
	const callers, rounds = 8, 12
	for _, burst := range []bool{false, true} {
		t.Run(fmt.Sprintf("burst=%v", burst), func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			srv := startPinnedDoor(t, h, func(o *agui.Options) { o.Limits.MaxQueuedPerThread = callers*rounds + 8 })
			url := aguiURL(srv, p.Key, "echo")
			thread := doneThread(t, h, p, url)
			stop := func() {}
			if burst {
				// A run on the thread the provider serves, storing a burst
				// of events while the callers post.
				s := openStream(t, "POST", url, input(thread, "burst", ""), nil)
				defer s.close()
				f := p.Offer()
				// The burst is under way before the first round (a barrier),
				// and still going after the last (checked below).
				stop = crowdtest.Burst(t, h, p, f.RunID, thread)
			}
			var refused []string
			for r := range rounds {
				var mu sync.Mutex
				var wg sync.WaitGroup
				start := make(chan struct{})
				for c := range callers {
					wg.Go(func() {
						<-start
						ctx, cancel := context.WithTimeout(context.Background(), guard)
						defer cancel()
						req, _ := http.NewRequestWithContext(ctx, "POST", url,
							strings.NewReader(input(thread, fmt.Sprintf("r%d-%d", r, c), "")))
						req.Header.Set("Content-Type", "application/json")
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							mu.Lock()
							refused = append(refused, fmt.Sprintf("round %d caller %d: %v", r, c, err))
							mu.Unlock()
							return
						}
						defer resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							b, _ := io.ReadAll(resp.Body)
							mu.Lock()
							refused = append(refused, fmt.Sprintf("round %d caller %d: %d %s", r, c, resp.StatusCode, b))
							mu.Unlock()
						}
					})
				}
				close(start)
				wg.Wait()
			}
			stop()
			for _, s := range refused {
				t.Error(s)
			}
			if n := len(refused); n > 0 {
				t.Errorf("%d of %d honest POSTs on one thread refused", n, callers*rounds)
			}
			if want, queued := callers*rounds-len(refused), crowdtest.Waiting(t, h, thread); queued != want {
				t.Errorf("%d runs waiting on the thread; want %d", queued, want)
			}
		})
	}
}
