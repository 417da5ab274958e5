package node_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// An offer out to one process of a key (link a, declared 1) answered by
// another process of the key (link b, D15) moves the run to b: a's own
// place is free again, so the run of a's agent waiting for that place is
// offered to a at once — not when the moved run ends, nor at the sweep's
// next nudge (the unserved window, 45 s).
func TestOfferMovedToAnotherLinkFreesTheOfferedLinksPlace(t *testing.T) {
	h := nodetest.Start(t, nil)
	a := h.Connect(0xe1, nodetest.Limit(1))
	a.Register("echo")
	b := h.Connect(0xe1, nodetest.Limit(4)) // the key's bucket: 4
	b.Register("other")
	first, thread := h.Door(a.Key, "echo", "", "one")
	if f := a.Offer(); f.RunID != first {
		t.Fatalf("offer %s, want %s", f.RunID, first)
	}
	second, _ := h.Door(a.Key, "echo", "", "two")
	h.Taken(second) // waits: a's process holds its 1
	b.Accept(first) // b's process takes the run offered to a
	h.WaitStatus(first, run.Running)
	h.Settle()
	var offered []string
	for _, f := range a.Barrier() {
		var r wire.RunFrame
		if json.Unmarshal(f, &r) == nil && r.Type == wire.TypeRun {
			offered = append(offered, r.RunID)
		}
	}
	if len(offered) != 1 || offered[0] != second {
		t.Fatalf("a was offered %v once b took %s; want %s, its own place being free", offered, first, second)
	}
	b.Complete(first, thread)
	h.WaitStatus(first, run.Completed)
}

// Seed 001: "A resumed run is claimed afresh, so it gets a whole new
// window" — and the window is what counts undelivered. A run's first round
// counted undelivered, then paused; the caller's answer opened a second
// round, which the provider took and then blocked in past its own window,
// or left holding (a goodbye). Each round is a turn the provider took and
// did not return (the reference's resumed turn is the next run), so the
// second is counted too: once per round, never hidden by the first.
func TestResumedRoundIsCountedAfresh(t *testing.T) {
	for _, how := range []string{"undelivered", "abandoned"} {
		t.Run(how, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			id, thread := h.Door(p.Key, "echo", "", "slow")
			p.Offer()
			p.Accept(id)
			h.WaitStatus(id, run.Running)
			h.Settle()
			h.Advance(1801 * time.Second)
			h.Eventually("round one counted undelivered", func() bool { return h.Quality(p.Key).Undelivered == 1 })
			p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int_1","reason":"confirm"}]}}`, thread, id))
			p.Finish(id)
			h.WaitStatus(id, run.InputRequired)
			if _, err := h.Store.ReopenRun(t.Context(), store.Reopen{RunID: id}); err != nil {
				t.Fatal(err)
			}
			if f := p.Offer(); f.RunID != id {
				t.Fatalf("offer %s, want the answered round of %s", f.RunID, id)
			}
			p.Accept(id)
			h.WaitStatus(id, run.Running)
			h.Settle()
			switch how {
			case "undelivered":
				h.Advance(1801 * time.Second) // round two's own window
			case "abandoned":
				p.Goodbye()
				h.WaitStatus(id, run.Failed)
			}
			// The sweep counts on its own time: waited for, as round
			// one's count was.
			h.Eventually("round two counted as well", func() bool {
				q := h.Quality(p.Key)
				return q.Undelivered+q.Abandoned == 2
			})
		})
	}
}
