package node_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
)

// A process told its link was replaced (D5), its link then dropped,
// reconnects without registering to finish the runs it holds. Such a link reports, it does not idle: the
// register deadline (design.md §The provider wire, "Admission") must not
// close it while it holds a run of its key it took a report for, or a run
// longer than FUNDUQ_REGISTER_DEADLINE loses its link every 30 s, waits the
// link grace each time, and is failed (abandoned counted against an honest
// key) when a reconnect misses the grace. A link of the same key that
// reports nothing is still closed at the deadline, and the finish-only link
// is closed too once it holds nothing. A raw provider (nodetest.Prov).
func TestFinishOnlyLinkOutlivesTheRegisterDeadline(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.Waits.LinkGrace = 5 * time.Second }) // the default
	old, newer, id, thread := startedThenReplaced(t, h, 0xe3)
	old.Close() // the replaced link drops

	// The old process comes back only to finish its run; a second link of
	// the key comes and reports nothing.
	back := h.Connect(0xe3, nil)
	idle := h.Connect(0xe3, nil)
	stored := 1
	report := func(ev string) {
		t.Helper()
		back.Event(id, ev)
		stored++
		h.Eventually(fmt.Sprintf("event %d stored", stored), func() bool {
			if c, err := back.Closed(); c {
				h.Settle()
				before := h.Run(id).Status
				h.Advance(5 * time.Second) // a reconnect that misses the link grace
				h.Eventually("the run ends after the link grace", func() bool { return h.Run(id).Status != run.Running })
				h.Settle()
				r := h.Run(id)
				t.Fatalf("the finish-only link was closed mid-run after %d events: %v (run %s; after the link grace %s %s, counted %+v)",
					stored-1, err, before, r.Status, r.FailureReason, h.Quality(old.Key))
			}
			return len(h.Events(id)) == stored
		})
	}
	report(`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	for i := range 9 { // 90 s of a run: three register deadlines
		h.Advance(10 * time.Second)
		report(fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"part %d "}`, i))
		if i == 2 {
			// The link that reported nothing was closed at its deadline.
			h.Eventually("the idle link is closed", func() bool { c, _ := idle.Closed(); return c })
			wantDeadlineClose(t, idle)
		}
	}
	report(`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	report(fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	back.Finish(id)
	h.WaitStatus(id, run.Completed)
	back.None() // nothing refused, and the link still open

	// Holding nothing and never registered: closed at a later deadline.
	h.Advance(30 * time.Second)
	h.Eventually("the finish-only link is closed once it holds nothing", func() bool { c, _ := back.Closed(); return c })
	wantDeadlineClose(t, back)
	h.Settle()
	if q := h.Quality(old.Key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
	// The newer process serves on.
	next, _ := h.Door(old.Key, "echo", "", "again")
	if o := newer.Offer(); o.RunID != next {
		t.Fatalf("offer %s, want %s", o.RunID, next)
	}
}

// wantDeadlineClose fails t unless p was closed 1008 for not registering.
func wantDeadlineClose(t *testing.T, p *nodetest.Prov) {
	t.Helper()
	_, err := p.Closed()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "register") {
		t.Fatalf("closed with %v; want 1008 saying no register came in time", err)
	}
}
