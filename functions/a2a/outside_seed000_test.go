package a2a_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// A caller's tasks/cancel races a late provider: the offer lapsed, and
// the provider's ack (with its whole round behind it) crosses the cancel.
// Whichever the run's lane reads first decides, and the record agrees
// with the counters: cancelled while nobody held it — the provider's
// reports refused, nothing counted late — or claimed (answered_late) and
// then ended by the provider's own RUN_FINISHED, which outranks the
// cancel. Never a third end, and never answered_late without the claim.
func TestOutsideCancelRacesALateAck(t *testing.T) {
	for i := range 6 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
			task := c.send(c.message("c-1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
			f := p.Offer()
			h.Settle()
			h.Advance(h.Cfg.Waits.DeliverTimeout)
			h.WaitStatus(f.RunID, run.Queued)
			var wg sync.WaitGroup
			var answer rpcResp
			wg.Add(1)
			go func() {
				defer wg.Done()
				answer = c.call("tasks/cancel", map[string]any{"id": task["id"]})
			}()
			if i%2 == 1 {
				wg.Wait() // the cancel recorded first, its notice on the way
				h.WaitStatus(f.RunID, run.Cancelled)
			}
			p.Accept(f.RunID)
			p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
			p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
			p.Finish(f.RunID)
			wg.Wait()
			if answer.Error != nil && answer.Error.Code != -32002 {
				t.Fatalf("cancel answered %+v", answer.Error)
			}
			h.Eventually("the run ends", func() bool { return h.Run(f.RunID).Status.Terminal() })
			h.Settle()
			before := p.Barrier()
			r := h.Run(f.RunID)
			q := h.Quality(p.Key)
			want := store.Quality{ProviderKey: p.Key, Unanswered: 1}
			switch r.Status {
			case run.Cancelled:
				// The provider's reports were refused, naming the run.
				told := false
				for _, fr := range before {
					var e wire.Error
					told = told || json.Unmarshal(fr, &e) == nil && e.Type == wire.TypeError && e.RunID == f.RunID
				}
				if !told {
					t.Fatalf("cancelled, and the provider was not told: %q", before)
				}
			case run.Completed:
				want.AnsweredLate = 1
			default:
				t.Fatalf("ended %s (%s)", r.Status, r.FailureReason)
			}
			if q != want {
				t.Fatalf("run %s, counted %+v, want %+v", r.Status, q, want)
			}
		})
	}
}
