package node_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/seeds"
)

// An offer goes out on a link the network has just killed: the provider
// never sees it (or its ack dies with the link) and re-attaches on a new
// link — while the old one still looks open (replaced), or after funduq saw
// it drop without a close frame (within the link grace). Nobody answered
// the offer because the network lost it, not because the provider ignored
// it: the run reaches the provider on its new link and nothing is counted
// (design.md D6, §Counters).
func TestOfferLostWithItsLinkCountsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost bool
	}{{"replaced", false}, {"lost", true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
			p1 := h.Connect(0xe1, nodetest.Limit(1))
			p1.Register("echo")
			id, thread := h.Door(p1.Key, "echo", "", "hi")
			if got := p1.Offer().RunID; got != id {
				t.Fatalf("offered %s, want %s", got, id)
			}
			if tc.lost {
				p1.Close() // no close frame
				h.Eventually("the lost link is dropped", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
			}
			p2 := h.Connect(0xe1, nodetest.Limit(1))
			p2.Register("echo")
			h.Settle()
			// The run reaches the new link without waiting out the old
			// offer's deliver_timeout (the clock does not move).
			for {
				typ, f := p2.Next()
				if typ != wire.TypeRun {
					continue
				}
				var o wire.RunFrame
				_ = json.Unmarshal(f, &o)
				if o.RunID == id {
					break
				}
			}
			p2.Accept(id)
			p2.Complete(id, thread)
			h.WaitStatus(id, run.Completed)
			h.Settle()
			if q := h.Quality(p1.Key); charges(q) != 0 || q.WithdrawnAt != nil {
				t.Fatalf("the provider lost an offer with its link and was counted %+v", q)
			}
		})
	}
}

// A provider of one place acks an offer, and its link dies with the ack on
// it (no close frame). It re-attaches — within the link grace, or before
// funduq noticed, replacing the dead link — still running
// the run it acked, while a second run of its agent waits. Whichever run
// funduq offers the new link first, the provider answers as its one place
// allows: the run it holds it accepts again (design.md D7: a provider that
// had accepted simply accepts again), anything else it declines until that
// run ends. It declared truly, so nothing counts (D6, §Counters); both runs
// complete.
func TestAckLostWithItsLinkCountsNoDecline(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost bool
	}{{"lost", true}, {"replaced", false}} {
		t.Run(tc.name, func(t *testing.T) { ackLost(t, tc.lost) })
	}
}

func ackLost(t *testing.T, lost bool) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p1 := h.Connect(0xe1, nodetest.Limit(1))
	p1.Register("echo")
	first, firstThread := h.Door(p1.Key, "echo", "", "one")
	if got := p1.Offer().RunID; got != first {
		t.Fatalf("offered %s, want %s", got, first)
	}
	second, secondThread := h.Door(p1.Key, "echo", "", "two")
	h.Taken(second)
	if lost {
		p1.Close() // the ack it was writing died with the link
		h.Eventually("the lost link is dropped", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
		h.Settle()
	} // else: funduq has not noticed yet; the new link replaces it
	p2 := h.Connect(0xe1, nodetest.Limit(1))
	p2.Register("echo")

	serveHoldingFirst(t, h, p2, "its link", map[string]string{first: firstThread, second: secondThread}, first)
}

// The same provider of one place across a takeover: its ack of an offer
// dies with the old leader, and it re-attaches to the new one still running
// that run (design.md D7: an offering run goes back to queued and "a
// provider that had accepted simply accepts again"). Another run of its
// agent waits meanwhile; the provider declines it while its place is taken,
// and nothing counts.
func TestAckLostWithTheLeaderCountsNoDecline(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p1 := a.Connect(0xe1, nodetest.Limit(1))
	p1.Register("echo")
	first, firstThread := a.Door(p1.Key, "echo", "", "one")
	if got := p1.Offer().RunID; got != first {
		t.Fatalf("offered %s, want %s", got, first)
	}
	a.WaitStatus(first, run.Offering)
	second, secondThread := a.Door(p1.Key, "echo", "", "two")
	a.Taken(second)
	a.Shutdown() // the ack p1 was writing is lost with the leader
	b.Eventually("b leads", b.Ready)
	p2 := b.Connect(0xe1, nodetest.Limit(1))
	p2.Register("echo")

	serveHoldingFirst(t, b, p2, "the leader", map[string]string{first: firstThread, second: secondThread}, first)
}

// serveHoldingFirst is the re-attached provider of one place still running
// holding, whose ack was lost with what lost says: it declines every other
// run offered while it holds it (and that decline must count nothing),
// then accepts and completes each run of threads as it is offered. At the
// end nothing is counted and the key is not withdrawn.
func serveHoldingFirst(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, lost string, threads map[string]string, holding string) {
	t.Helper()
	done := map[string]bool{}
	for len(done) < len(threads) {
		typ, f := p.Next()
		if typ != wire.TypeRun {
			continue
		}
		var o wire.RunFrame
		_ = json.Unmarshal(f, &o)
		if holding != "" && o.RunID != holding {
			p.Decline(o.RunID)
			h.Settle()
			if q := h.Quality(p.Key); charges(q) != 0 {
				t.Fatalf("the provider, holding %s (its ack lost with %s), declined %s and was counted %+v", holding, lost, o.RunID, q)
			}
			continue
		}
		p.Accept(o.RunID)
		p.Complete(o.RunID, threads[o.RunID])
		h.WaitStatus(o.RunID, run.Completed)
		done[o.RunID] = true
		holding = ""
	}
	h.Settle()
	if q := h.Quality(p.Key); charges(q) != 0 || q.WithdrawnAt != nil {
		t.Fatalf("counted %+v", q)
	}
}

// The seeded fairness run: an honest raw provider of a few places (not the
// SDK) serves a handful of runs, and at a seeded offer the network takes
// its link — with the ack on it or just after — either as a drop funduq
// sees (no close frame) or as a half-open link the provider replaces by
// re-attaching. The provider keeps running what it acked, reports it on
// its new link (with its own seq or without, seeded), accepts again what it
// is offered again, and declines only what its places cannot take. Every
// run completes with its events stored once, and nothing counts (design.md
// D6, §Counters). FUNDUQ_FAIRNESS_SEEDS picks the seeds (default 1-6).
func TestSeededHonestProviderIsNeverCounted(t *testing.T) {
	seeds.Run(t, "FUNDUQ_FAIRNESS_SEEDS", "1-6", seededFairness)
}

func seededFairness(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	places := 1 + rng.IntN(3)
	runs := places + 1 + rng.IntN(3)
	cutAt := 1 + rng.IntN(places) // the offer whose ack the network takes
	lost := rng.IntN(2) == 0      // funduq sees the drop, or the link is replaced
	useSeq := rng.IntN(2) == 0
	t.Logf("seed %d: places %d, runs %d, cut at offer %d, lost %v, seq %v", seed, places, runs, cutAt, lost, useSeq)

	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe1, nodetest.Limit(places))
	p.Register("echo")
	threads := map[string]string{}
	for i := 0; i < runs; i++ {
		id, thread := h.Door(p.Key, "echo", "", fmt.Sprintf("run %d", i))
		threads[id] = thread
		h.Taken(id)
	}
	script := func(id string) []string {
		th := threads[id]
		return []string{
			fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, th, id),
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`,
			`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
			fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, th, id),
		}
	}
	// report sends a run's whole script as one burst and its finish right
	// behind the last event.
	report := func(p *nodetest.Prov, id string) {
		for i, ev := range script(id) {
			f := wire.Event{Type: wire.TypeEvent, RunID: id, Event: json.RawMessage(ev)}
			if useSeq {
				s := int64(i + 1)
				f.ProviderSeq = &s
			}
			p.Send(f)
		}
		p.Finish(id)
		h.Eventually("run "+id+" ends", func() bool { return h.Run(id).Status.Terminal() })
	}
	t.Cleanup(func() {
		if t.Failed() {
			sn := h.Node.Broker.Snapshot()
			t.Logf("broker: lanes %v, in flight %v, links %d", sn.Lanes, sn.InFlight, sn.Links)
		}
	})
	// pending: runs it acked before the cut and runs still; it reports
	// them once its new link has carried one frame.
	var pending []string
	offers := 0
	for {
		done := 0
		for id := range threads {
			if h.Run(id).Status.Terminal() {
				done++
			}
		}
		if done == runs {
			break
		}
		typ, f := p.Next()
		if typ == wire.TypeRun {
			var o wire.RunFrame
			_ = json.Unmarshal(f, &o)
			switch {
			case slices.Contains(pending, o.RunID):
				p.Accept(o.RunID) // offered again what it runs: accepts again (D7)
			case len(pending) >= places:
				p.Decline(o.RunID)
				h.Settle()
				if q := h.Quality(p.Key); charges(q) != 0 {
					t.Fatalf("declined %s running %v of %d places and was counted %+v", o.RunID, pending, places, q)
				}
				continue
			default:
				offers++
				if offers != cutAt {
					p.Accept(o.RunID)
					report(p, o.RunID)
					continue
				}
				// The ack goes to a link the network has lost: it never
				// arrives (nodetest cannot hold a frame back, so it is
				// not sent). The provider re-attaches, running the run.
				pending = append(pending, o.RunID)
				old := p
				if lost {
					old.Close()
					h.Eventually("the lost link is dropped", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
				}
				p = h.Connect(0xe1, nodetest.Limit(places))
				p.Register("echo")
				if !lost {
					old.Close() // replaced, left open; found dead at last
				}
				continue
			}
		}
		for _, id := range pending {
			report(p, id)
		}
		pending = nil
	}
	h.Settle()
	for id := range threads {
		if r := h.Run(id); r.Status != run.Completed {
			t.Errorf("run %s is %s (%s)", id, r.Status, r.FailureReason)
		}
		var got []string
		for _, e := range h.Events(id) {
			got = append(got, e["type"].(string))
		}
		want := []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}
		if !slices.Equal(got, want) {
			t.Errorf("run %s stored %v, want %v once each", id, got, want)
		}
	}
	if q := h.Quality(p.Key); charges(q) != 0 || q.WithdrawnAt != nil {
		t.Fatalf("counted %+v", q)
	}
}
