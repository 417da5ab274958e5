package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A provider process whose link stalls opens a new one and registers
// again, which replaces the old link; the run it held passes to the new
// link when that link reports for it or the old one is found dead
// (design.md D5). A cancel asked for before that
// went out on the old link, where the process may never have read it. The
// link the run now lives on is told anew, as a link re-adopting a run after
// a takeover or a lost link is (design.md §The status machine): otherwise
// the caller was answered "cancel requested" and the provider running the
// run is never asked to stop. Nothing is counted against the key.
func TestCancelFollowsARunToTheLinkReplacingItsHolder(t *testing.T) {
	for _, report := range []bool{false, true} {
		// report: the new link reports for the run before the old link is
		// found dead (the run is taken along by the report).
		t.Run(fmt.Sprintf("reported first %v", report), func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p1 := h.Connect(0xe1, nil)
			p1.Register("echo")
			id, thread := h.Door(p1.Key, "echo", "", "one")
			p1.Offer()
			p1.Accept(id)
			p1.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
			h.WaitStatus(id, run.Running)
			if _, err := h.Store.RequestCancel(context.Background(), id, ""); err != nil {
				t.Fatal(err)
			}
			p1.Expect(wire.TypeCancel, nil) // sent on the stalled link, unread by the process
			h.WaitStatus(id, run.Cancelling)

			p2 := h.Connect(0xe1, nil)
			p2.Register("echo")
			if report {
				p2.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`)
			}
			p1.Close() // the stalled link found dead at last
			h.Settle()
			if !report {
				p2.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`)
			}
			told := false
			for _, f := range p2.Barrier() {
				var c wire.Cancel
				if typ, _ := wire.PeekType(f); typ == wire.TypeCancel && json.Unmarshal(f, &c) == nil && c.RunID == id {
					told = true
				}
			}
			if !told {
				t.Fatalf("the link now holding %s was never asked to cancel it", id)
			}
			p2.Finish(id)
			if r := h.WaitStatus(id, run.Cancelled); r.Status != run.Cancelled {
				t.Fatalf("status %s", r.Status)
			}
			h.Settle()
			if q := h.Quality(p1.Key); charges(q) != 0 {
				t.Fatalf("counted %+v", q)
			}
		})
	}
}
