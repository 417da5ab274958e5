package node_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// expectReplaced reads p's next frame and fails unless it is the replaced
// notice.
func expectReplaced(t *testing.T, p *nodetest.Prov) {
	t.Helper()
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.Message != wire.ReplacedMessage || e.RunID != "" || e.Name != "" {
		t.Fatalf("told %+v, want replaced", e)
	}
}

// wantClosedWith waits for funduq to close p and fails unless the close
// frame says reason.
func wantClosedWith(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, reason string) {
	t.Helper()
	h.Eventually("the link is closed", func() bool { c, _ := p.Closed(); return c })
	_, err := p.Closed()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Text != reason {
		t.Fatalf("closed with %v, want %q", err, reason)
	}
}

// A replaced link holding a run is left open (design.md §Two processes of
// one key): its process finishes the run over it, its query is answered,
// it is offered nothing more, and it ends when its process closes it —
// the run long completed, nothing counted, the newer link serving on.
func TestReplacedLinkFinishesItsRunsOverItself(t *testing.T) {
	h := nodetest.Start(t, nil)
	old, newer, id, thread := startedThenReplaced(t, h, 0xe4)
	expectReplaced(t, old)
	old.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	old.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`)
	old.Event(id, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	old.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	old.Finish(id)
	h.WaitStatus(id, run.Completed)
	if evs := h.Events(id); len(evs) != 5 {
		t.Errorf("stored %d events, want 5", len(evs))
	}
	// Runs go to the newer link; the replaced one is offered none.
	next, nextThread := h.Door(old.Key, "echo", "", "again")
	if o := newer.Offer(); o.RunID != next {
		t.Fatalf("offer %s, want %s", o.RunID, next)
	}
	newer.Accept(next)
	newer.Complete(next, nextThread)
	h.WaitStatus(next, run.Completed)
	old.None() // open, its query answered, nothing refused or offered
	if n := h.Node.Broker.Snapshot().Links; n != 2 {
		t.Fatalf("%d links, want the replaced one open beside the newer", n)
	}
	old.Goodbye()
	h.Eventually("the replaced link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	h.Settle()
	if q := h.Quality(old.Key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
	newer.None()
}

// The link that replaced another goes away — a goodbye, lost without a
// close frame, or deleting what it serves, as our SDK does first when it
// shuts down — leaving the agent served by no link: the replaced link is
// closed then, saying why, so that its process (the reference SDK
// reconnects after any closed link) registers again and serves the agent,
// where left open it would sit idle with the agent unserved for as long as
// it runs. Its next link takes the agent back and runs go to it.
func TestReplacedLinkClosesWhenItsReplacementGoes(t *testing.T) {
	for _, how := range []string{"goodbye", "lost", "deleted"} {
		t.Run(how, func(t *testing.T) {
			h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
			old := h.Connect(0xe5, nil)
			old.Register("echo")
			other := h.Connect(0xe5, nil) // serves another agent of the key: never closed for it
			other.Register("other")
			newer := h.Connect(0xe5, nil)
			newer.Register("echo")
			expectReplaced(t, old)
			old.None()
			switch how {
			case "goodbye":
				newer.Goodbye()
			case "lost":
				newer.Close()
			case "deleted":
				newer.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "echo"})
				newer.Expect(wire.TypeDeleted, nil)
			}
			wantClosedWith(t, h, old, broker.ReasonReplacementGone)
			if how == "deleted" {
				newer.Goodbye()
			}
			h.Eventually("one link left", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
			other.None()

			back := h.Connect(0xe5, nil) // the old process, reconnected
			back.Register("echo")
			id, thread := h.Door(back.Key, "echo", "", "hi")
			if o := back.Offer(); o.RunID != id {
				t.Fatalf("offer %s, want %s", o.RunID, id)
			}
			back.Accept(id)
			back.Complete(id, thread)
			h.WaitStatus(id, run.Completed)
			h.Settle()
			if q := h.Quality(back.Key); charges(q) != 0 {
				t.Fatalf("counted %+v", q)
			}
		})
	}
}

// A link of the key other than the replacement closing leaves the
// replaced link open: the agent is still served. So does the serving link
// deleting one of its agents while it serves others: that is its
// process's choice, and the replaced link's process, registering its
// whole roster again, would take the others too.
func TestReplacedLinkStaysOpenWhileItsAgentIsServed(t *testing.T) {
	h := nodetest.Start(t, nil)
	old := h.Connect(0xe6, nil)
	old.Register("echo")
	newer := h.Connect(0xe6, nil)
	newer.Register("echo")
	expectReplaced(t, old)
	third := h.Connect(0xe6, nil)
	third.Register("echo") // replaces newer in turn
	expectReplaced(t, newer)
	newer.Goodbye() // a replaced link going: it served nothing
	h.Eventually("two links left", func() bool { return h.Node.Broker.Snapshot().Links == 2 })
	old.None()
	third.Register("echo", "other")
	third.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "echo"})
	third.Expect(wire.TypeDeleted, nil)
	old.None()
	third.Register("echo", "other")
	id, _ := h.Door(old.Key, "echo", "", "hi")
	if o := third.Offer(); o.RunID != id {
		t.Fatalf("offer %s, want %s", o.RunID, id)
	}
}

// A key holds at most broker.MaxLinksPerKey links open while some are
// replaced: past it the oldest replaced one is closed, saying why, so a
// stranger's key registering link after link cannot pile up idle links,
// one per ticket, outside the bound on links not yet registered. The
// others stay open and read.
func TestReplacedLinksOfAKeyAreBounded(t *testing.T) {
	h := nodetest.Start(t, nil)
	var links []*nodetest.Prov
	for i := range broker.MaxLinksPerKey + 2 {
		p := h.Connect(0xe7, nil)
		p.Register("echo")
		if i > 0 {
			expectReplaced(t, links[i-1])
		}
		links = append(links, p)
	}
	wantClosedWith(t, h, links[0], broker.ReasonTooManyLinks)
	wantClosedWith(t, h, links[1], broker.ReasonTooManyLinks)
	h.Eventually("the bound's links left", func() bool { return h.Node.Broker.Snapshot().Links == broker.MaxLinksPerKey })
	for _, p := range links[2:] {
		p.None()
	}
	id, _ := h.Door(links[0].Key, "echo", "", "hi")
	if o := links[len(links)-1].Offer(); o.RunID != id {
		t.Fatalf("offer %s, want %s", o.RunID, id)
	}
}

// A replaced link that registers again serves again, by the rule that
// replaced it (the last register of a name wins): it is answered
// registered, the link that replaced it is told replaced in turn and left
// open, and runs go to the re-registered link.
func TestReplacedLinkRegisteringAgainServesAgain(t *testing.T) {
	h := nodetest.Start(t, nil)
	old := h.Connect(0xe8, nil)
	old.Register("echo")
	newer := h.Connect(0xe8, nil)
	newer.Register("echo")
	expectReplaced(t, old)
	old.Register("echo")
	expectReplaced(t, newer)
	id, thread := h.Door(old.Key, "echo", "", "hi")
	if o := old.Offer(); o.RunID != id {
		t.Fatalf("offer %s, want %s", o.RunID, id)
	}
	old.Accept(id)
	old.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	newer.None()
	// newer is a replaced link now: when old goes, it is closed so its
	// process comes back for the agent.
	old.Goodbye()
	wantClosedWith(t, h, newer, broker.ReasonReplacementGone)
}

// An offer out to a link when it is replaced is offered again to the link
// that replaced it at once — the fake clock does not move, so nothing
// waits the deliver_timeout — and uncounted: the replaced link's process
// may have died unseen (a process's next link replaces its own lost one),
// and it is offered nothing more. Its lapse later counts nothing either.
func TestOfferOutToAReplacedLinkMovesAtOnce(t *testing.T) {
	h := nodetest.Start(t, nil)
	p1 := h.Connect(0xe9, nil)
	p1.Register("echo")
	id, thread := h.Door(p1.Key, "echo", "", "hi")
	p1.Offer() // and never answered
	p2 := h.Connect(0xe9, nil)
	p2.Register("echo")
	expectReplaced(t, p1)
	if o := p2.Offer(); o.RunID != id {
		t.Fatalf("offer %s, want %s offered again to the newer link", o.RunID, id)
	}
	p2.Accept(id)
	h.WaitStatus(id, run.Running)
	h.Advance(h.Cfg.DeliverTimeout + time.Millisecond) // the first offer's time: nothing lapses
	p2.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if q := h.Quality(p1.Key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
	p1.None()
}

// The replaced link's process had taken the offer as it was replaced (its
// ack crossed the replaced notice): the ack, read after the offer moved to
// the newer link, is its key's answer (D15) and the run is its; the newer
// link's ack is refused and its place freed; the run completes over the
// replaced link, and nothing is counted.
func TestReplacedLinksAckOfAMovedOfferTakesTheRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p1 := h.Connect(0xea, nil)
	p1.Register("echo")
	id, thread := h.Door(p1.Key, "echo", "", "hi")
	p1.Offer()
	p2 := h.Connect(0xea, nil)
	p2.Register("echo")
	if o := p2.Offer(); o.RunID != id {
		t.Fatalf("offer %s, want %s", o.RunID, id)
	}
	p1.Accept(id)
	h.WaitStatus(id, run.Running)
	expectReplaced(t, p1)
	p2.Accept(id)
	var e wire.Error
	p2.Expect(wire.TypeError, &e)
	if e.RunID != id || !strings.Contains(e.Message, "refused") {
		t.Fatalf("newer link told %+v, want its ack refused", e)
	}
	p1.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if q := h.Quality(p1.Key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
	p1.None()
	p2.None()
}
