package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// Outside tests of two processes of one provider key (docs/design.md §Two
// processes of one key, D7 "A resend read before register", D15), written
// against the real node with raw providers that behave unlike our SDK:
// they race registers and deletes, ignore taken and freed notices, are cut
// at a seeded step of a run, and resend what they kept. Each asserts what a
// user would notice: the run ends or pauses visibly, its events are stored
// once and in order, every report is taken or answered with a typed error,
// and no honest link is closed for what another process did.

// expectNotice reads the next frame of p and fails t unless it is an error
// frame naming agent name, no run, with message msg.
func expectNotice(t *testing.T, p *nodetest.Prov, name, msg string) {
	t.Helper()
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.Name != name || e.Message != msg || e.RunID != "" {
		t.Fatalf("told %+v, want %q naming %s", e, msg, name)
	}
}

// notices decodes frames, each of which must be an error frame naming an
// agent and no run, as "message:name" strings.
func notices(t *testing.T, frames [][]byte) []string {
	t.Helper()
	var out []string
	for _, f := range frames {
		var e wire.Error
		if typ, _ := wire.PeekType(f); typ != wire.TypeError || json.Unmarshal(f, &e) != nil || e.Name == "" || e.RunID != "" {
			t.Fatalf("unexpected frame: %s", f)
		}
		out = append(out, noticeKey(e.Message, e.Name))
	}
	return out
}

func noticeKey(msg, name string) string {
	switch msg {
	case wire.TakenMessage:
		return "taken:" + name
	case wire.FreedMessage:
		return "freed:" + name
	}
	return "error(" + msg + "):" + name
}

// roundFrames is a whole round of run id as a raw provider writes it:
// five events numbered 1…5 (the resend guard, D7) and the finish.
func roundFrames(id, thread string) []string {
	evs := []string{
		fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id),
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id),
	}
	out := make([]string, 0, len(evs)+1)
	for i, e := range evs {
		out = append(out, eventFrame(id, i+1, e))
	}
	return append(out, fmt.Sprintf(`{"type":"finish","runId":%q}`, id))
}

// storedEvent is one stored event of a run: the provider's seq (0 when
// none) and the text as stored.
type storedEvent struct {
	pseq int64
	text string
}

// storedRows is what the caller's stream of run id holds, in order.
func storedRows(t *testing.T, h *nodetest.Harness, id string) []storedEvent {
	t.Helper()
	rows, err := h.DB().Query(context.Background(),
		`SELECT coalesce(provider_seq, 0), event::text FROM run_events WHERE run_id = $1 ORDER BY seq`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedEvent
	for rows.Next() {
		var e storedEvent
		if err := rows.Scan(&e.pseq, &e.text); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantRound fails t unless run id's stored stream is round (frames as
// roundFrames makes them) exactly: each event once, in order.
func wantRound(t *testing.T, h *nodetest.Harness, id string, round []string) {
	t.Helper()
	got := storedRows(t, h, id)
	var want []storedEvent
	for _, f := range round {
		var ev struct {
			Type  string          `json:"type"`
			Seq   int64           `json:"seq"`
			Event json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal([]byte(f), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == wire.TypeEvent {
			want = append(want, storedEvent{ev.Seq, string(ev.Event)})
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("stored %v, want the round once, in order: %v", got, want)
	}
}

// terminal waits until run id has ended, and returns it.
func terminal(t *testing.T, h *nodetest.Harness, id string) run.Status {
	t.Helper()
	var st run.Status
	h.EventuallyExplained("run "+id+" ends", func() bool {
		st = h.Run(id).Status
		return st == run.Completed || st == run.Failed || st == run.Cancelled
	}, func() string { return h.DescribeRun(id) })
	return st
}

// A raw older process sends deleteAgent for the name a newer process of
// its key took from it (it ignored the taken notice). The design: a
// deleteAgent acts on the link that serves the name, so it is refused,
// typed, and changes nothing — the newer link goes on serving the name and
// is offered its runs; no freed notice goes out. When the taker deletes it,
// the older link is told it is free and takes it back by registering it.
func TestOutsideDeleteOfATakenNameIsRefusedOnTheOlderLink(t *testing.T) {
	h := nodetest.Start(t, nil)
	older := h.Connect(0xd0, nil)
	older.Register("x", "y")
	newer := h.Connect(0xd0, nil)
	newer.Register("x", "z")
	expectNotice(t, older, "x", wire.TakenMessage)
	older.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "x"})
	var e wire.Error
	older.Expect(wire.TypeError, &e)
	if e.Name != "x" || !strings.Contains(e.Message, "another link") {
		t.Fatalf("older link's delete of the taken name answered %+v, want the sibling refusal naming x", e)
	}
	newer.None() // no freed notice: the name is still served
	older.None()
	if got := servedNames(h, older.Key); !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("served %v after a refused delete", got)
	}
	id, thread := h.Door(older.Key, "x", "", "hi")
	if f := newer.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
	newer.Accept(id)
	newer.Complete(id, thread)
	h.WaitStatus(id, run.Completed)

	// The taker deletes it: refused, as it has a conversation behind it,
	// but taken out of service all the same (design.md §The provider
	// wire), so it is announced free to the older link.
	newer.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "x"})
	newer.Expect(wire.TypeError, &e)
	if e.Name != "x" {
		t.Fatalf("taker's delete answered %+v", e)
	}
	expectNotice(t, older, "x", wire.FreedMessage)
	older.Register("x", "y")
	id2, _ := h.Door(older.Key, "x", "", "again")
	if f := older.Offer(); f.RunID != id2 {
		t.Fatalf("offer %s, want %s", f.RunID, id2)
	}
	newer.None()
	if closed, err := older.Closed(); closed {
		t.Fatalf("older link closed: %v", err)
	}
}

// Two raw processes of one key, each serving an agent of its own and both
// declaring x, race registers and deleteAgents in a seeded order, ignoring
// every taken and freed notice (as the reference's SDK does). A model of
// the roster says, at every step, who serves x, what the acting link is
// answered and which notice the other link gets: exactly one taken notice
// per take from the other link, one freed notice per end of a taken name's
// service, nothing else, and neither link closed (each still serves its
// own agent). At the end x's run goes to the link the model says serves it.
func TestOutsideTwoProcessesRaceRegistersAndDeletes(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x7a))
			t.Logf("seed %d", seed)
			h := nodetest.Start(t, nil)
			links := [2]*nodetest.Prov{h.Connect(0xd2, nil), h.Connect(0xd2, nil)}
			own := [2]string{"a", "b"}
			// The key is recorded first: two first registers of a new key
			// at once are TestOutsideFirstRegistersOfANewKeyAtOnce's.
			links[0].Register(own[0])
			// Then both register x at once: whichever is read second takes
			// it, and the first is told.
			var wg sync.WaitGroup
			for i, p := range links {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "x"}, {Name: own[i]}}})
				}()
			}
			wg.Wait()
			for _, p := range links {
				var r wire.Registered
				p.Expect(wire.TypeRegistered, &r)
			}
			// A notice is written after the taker's registered; a roster
			// change on any link (ReadBarrier's deleteAgent) is made after it.
			first := links[0].ReadBarrier()
			told := [2][]string{notices(t, append(first, links[0].Barrier()...)), notices(t, links[1].Barrier())}
			owner := -1
			switch {
			case slices.Equal(told[0], []string{"taken:x"}) && len(told[1]) == 0:
				owner = 1
			case slices.Equal(told[1], []string{"taken:x"}) && len(told[0]) == 0:
				owner = 0
			default:
				t.Fatalf("racing registers told %v, want exactly one taken notice to the first registrant", told)
			}
			displaced, recorded := true, true
			for step := range 14 {
				i := rng.IntN(2)
				j := 1 - i
				p := links[i]
				var want []string // the notices j is owed
				switch act := rng.IntN(4); act {
				case 3: // the process leaves (a goodbye or a lost link) and comes back serving its own agent
					goodbye := rng.IntN(2) == 0
					t.Logf("step %d: link %d leaves (goodbye %v) and comes back with %s alone", step, i, goodbye, own[i])
					if goodbye {
						p.Goodbye()
					} else {
						p.Close()
					}
					h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
					p = h.Connect(0xd2, nil)
					links[i] = p
					p.Register(own[i]) // after the close's notices: both change the roster
					if owner == i {
						owner = -1
						if displaced {
							want, displaced = []string{"freed:x"}, false
						}
					}
				case 0: // register the whole roster, taking x back
					t.Logf("step %d: link %d registers x and %s", step, i, own[i])
					if got := registerSeeing(p, "x", own[i]); len(got) > 0 {
						t.Fatalf("step %d: before registered: %s", step, got[0])
					}
					if owner == j {
						want = []string{"taken:x"}
						displaced = true
					}
					owner, recorded = i, true
				case 1: // register without x
					t.Logf("step %d: link %d registers %s alone", step, i, own[i])
					if got := registerSeeing(p, own[i]); len(got) > 0 {
						t.Fatalf("step %d: before registered: %s", step, got[0])
					}
					if owner == i {
						owner = -1
						if displaced {
							want, displaced = []string{"freed:x"}, false
						}
					}
				case 2: // deleteAgent x
					t.Logf("step %d: link %d deletes x", step, i)
					p.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "x"})
					typ, f := p.Next()
					var e wire.Error
					_ = json.Unmarshal(f, &e)
					switch {
					case owner == j:
						if typ != wire.TypeError || e.Name != "x" || !strings.Contains(e.Message, "another link") {
							t.Fatalf("step %d: delete of x served by the other link answered %s", step, f)
						}
					case !recorded:
						if typ != wire.TypeError || e.Name != "x" || !strings.Contains(e.Message, "not registered") {
							t.Fatalf("step %d: delete of x deleted before answered %s", step, f)
						}
					default:
						if typ != wire.TypeDeleted {
							t.Fatalf("step %d: delete of x answered %s, want deleted", step, f)
						}
						recorded = false
						if owner == i {
							owner = -1
							if displaced {
								want, displaced = []string{"freed:x"}, false
							}
						}
					}
				}
				if got := p.ReadBarrier(); len(got) > 0 { // after every notice of the step
					t.Fatalf("step %d: the acting link was told %s", step, got[0])
				}
				if got := notices(t, links[j].Barrier()); !slices.Equal(got, want) {
					t.Fatalf("step %d: the other link was told %v, want %v", step, got, want)
				}
				if got := notices(t, p.Barrier()); len(got) > 0 {
					t.Fatalf("step %d: the acting link was told %v", step, got)
				}
			}
			for i, p := range links {
				if closed, err := p.Closed(); closed {
					t.Fatalf("link %d closed: %v", i, err)
				}
			}
			served := servedNames(h, links[0].Key)
			if wantX := owner >= 0; slices.Contains(served, "x") != wantX {
				t.Fatalf("served %v, x served by link %d per the model", served, owner)
			}
			if owner < 0 {
				return
			}
			id, thread := h.Door(links[0].Key, "x", "", "hi")
			if f := links[owner].Offer(); f.RunID != id {
				t.Fatalf("offer %s, want %s", f.RunID, id)
			}
			links[owner].Accept(id)
			links[owner].Complete(id, thread)
			h.WaitStatus(id, run.Completed)
			links[1-owner].None()
		})
	}
}

// The taker of a name is cut (closed without a close frame) at a seeded
// step of a run of that name — before its ack, after it, mid-events, after
// its finish — with or without the broker having read what it wrote
// first. The older process of the key, registered all along, is told x is
// free and takes it back (as our SDK does); the taker's process comes back
// on a new link, resends what it wrote (with its seqs) before its register,
// registers x again and finishes the round. Whoever ends up running it,
// the caller sees the run complete with its round stored once, in order;
// every report is taken or refused typed; the older link is never closed
// and is told only of its name being taken and freed; nothing is counted
// against the key.
func TestOutsideTakerCutAtASeededStepOfARun(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x2b))
			cut := rng.IntN(8) // 0: before the ack; 1: after it; 2…6: after cut-1 events; 7: after the finish
			flushed := rng.IntN(2) == 0
			t.Logf("seed %d: cut after step %d, broker read it all first: %v", seed, cut, flushed)
			h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
			older := h.Connect(0xd1, nil)
			older.Register("x", "y")
			taker := h.Connect(0xd1, nil)
			taker.Register("x")
			expectNotice(t, older, "x", wire.TakenMessage)
			id, thread := h.Door(older.Key, "x", "", "hi")
			if f := taker.Offer(); f.RunID != id {
				t.Fatalf("offer %s, want %s", f.RunID, id)
			}
			round := roundFrames(id, thread)
			var sent []string
			if cut >= 1 {
				sent = append([]string{fmt.Sprintf(`{"type":"ack","runId":%q}`, id)}, round[:cut-1]...)
			}
			for _, f := range sent {
				taker.SendRaw(f)
			}
			if flushed {
				if got := taker.ReadBarrier(); len(got) > 0 {
					t.Fatalf("taker told %s", got[0])
				}
			}
			taker.Close()
			h.Eventually("the taker's link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
			expectNotice(t, older, "x", wire.FreedMessage)
			if got := registerSeeing(older, "x", "y"); len(got) > 0 {
				t.Fatalf("older told %s before registered", got[0])
			}
			olderRuns := false
			for _, f := range older.Barrier() {
				var r wire.RunFrame
				if typ, _ := wire.PeekType(f); typ != wire.TypeRun || json.Unmarshal(f, &r) != nil || r.RunID != id {
					t.Fatalf("older link told %s", f)
				}
				olderRuns = true // the taker's ack never reached funduq: the run was offered again
				older.Accept(id)
				older.Complete(id, thread)
			}
			if cut == 0 && !olderRuns {
				t.Fatalf("an offer lost with its link was not offered to the key's other process: %s", h.DescribeRun(id))
			}
			h.Settle()
			endedBefore := h.Run(id).Status.Terminal()

			back := h.Connect(0xd1, nil)
			for _, f := range sent {
				back.SendRaw(f)
			}
			got := back.ReadBarrier()
			got = append(got, registerSeeing(back, "x")...)
			expectNotice(t, older, "x", wire.TakenMessage)
			if !olderRuns && !endedBefore {
				rest := round
				if cut >= 1 {
					rest = round[cut-1:]
				}
				for _, f := range rest {
					back.SendRaw(f)
				}
			}
			got = append(got, back.Barrier()...)
			st := terminal(t, h, id)
			refused := refusals(t, back, got, len(got))
			for _, e := range refused {
				if e.RunID != id {
					t.Fatalf("the process back was told %+v", e)
				}
			}
			switch {
			case olderRuns:
				if s := storedTypes(h, id); s != "RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END RUN_FINISHED" {
					t.Fatalf("stored %s, want the older process's round once", s)
				}
				if len(refused) != len(sent) {
					t.Fatalf("the process back sent %d reports for a run another process ran, and was told %v", len(sent), refused)
				}
			default:
				wantRound(t, h, id, round)
				if !endedBefore && len(refused) > 0 {
					t.Fatalf("the process back, finishing the run it held, was refused %v; %s", refused, h.DescribeRun(id))
				}
				if endedBefore && len(refused) != len(sent) {
					t.Fatalf("its resend of an ended run was answered %v, want each of %d refused", refused, len(sent))
				}
			}
			if st != run.Completed {
				t.Fatalf("run %s, want completed: %s", st, h.DescribeRun(id))
			}
			older.None()
			if closed, err := older.Closed(); closed {
				t.Fatalf("the older link was closed: %v", err)
			}
			if q := h.Quality(older.Key); charges(q) != 0 {
				t.Fatalf("counted %+v against the key", q)
			}
		})
	}
}

// A second process of a key, not yet registered, resends a round of a run
// another live link of the key holds — and resends it twice (a retry loop
// without the SDK's bookkeeping). Both copies are kept for its register
// (D7); the register replaces the holder, the run passes, and the kept
// reports are taken: each event stored once, in order, the repeats taken as
// resends (same seq, same text) without a refusal.
func TestOutsideKeptResendSentTwiceIsStoredOnce(t *testing.T) {
	h, a, id, thread := echoRunAccepted(t, 0xd3)
	round := roundFrames(id, thread)
	a.SendRaw(round[0])
	if got := a.Barrier(); len(got) > 0 {
		t.Fatalf("holder told %s", got[0])
	}
	b := h.Connect(0xd3, nil)
	for range 2 {
		for _, f := range round[:3] {
			b.SendRaw(f)
		}
	}
	got := append(b.ReadBarrier(), registerSeeing(b, "echo")...) // replaces a
	var e wire.Error
	a.Expect(wire.TypeError, &e)
	if e.Message != wire.ReplacedMessage {
		t.Fatalf("holder told %+v, want replaced", e)
	}
	for _, f := range round[3:] {
		b.SendRaw(f)
	}
	got = append(got, b.Barrier()...)
	if len(got) > 0 {
		t.Fatalf("the resending process was told %s", got[0])
	}
	h.WaitStatus(id, run.Completed)
	wantRound(t, h, id, round)
}

// A second process resends more reports before its register than a link
// may keep (half FUNDUQ_LINK_EVENT_BACKLOG). Past the bound each of them —
// those kept before it included — is refused typed, naming the run, and
// none is stored (no hole). Told so, the process registers, which passes
// the run to it, and sends the round again: the caller's stream holds the
// round once, in order. The same when the run's lane is busy in the
// holder's write (a held lock) and gets to the reports only after the
// register: the bound is judged on the reports as they were read
// (design.md D7), where they were taken.
func TestOutsideReportsBeyondTheKeepBoundAreRefusedWhole(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("lane busy %v", busy), func(t *testing.T) {
			h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second; c.LinkEventBacklog = 4 })
			a := h.Connect(0xd4, nil)
			a.Register("echo")
			id, thread := h.Door(a.Key, "echo", "", "q")
			a.Offer()
			a.Accept(id)
			h.WaitStatus(id, run.Running)
			round := roundFrames(id, thread)
			release := func() {}
			want := ""
			if busy {
				release = h.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
				a.SendRaw(round[0]) // the holder's first event, its write waiting on the lock
				h.Eventually("the lane waits in the holder's write", h.LockWaitsOn("runs"))
				want = "RUN_STARTED"
			}
			b := h.Connect(0xd4, nil)
			for _, f := range round[:4] { // keeps 2, the third is past the bound
				b.SendRaw(f)
			}
			got := b.ReadBarrier()
			if !busy {
				h.Settle() // the lane reaches them before the register
			}
			got = append(got, registerSeeing(b, "echo")...) // replaces a
			release()
			h.Settle()
			got = append(got, b.Barrier()...)
			for _, e := range refusals(t, b, got, 4) {
				if e.RunID != id || !strings.Contains(e.Message, "held by another link") {
					t.Fatalf("told %+v, want each report past the bound refused naming %s", e, id)
				}
			}
			if s := storedTypes(h, id); s != want {
				t.Fatalf("stored %q with the reports past the bound refused, want %q", s, want)
			}
			for _, f := range round {
				b.SendRaw(f)
			}
			if got := b.Barrier(); len(got) > 0 {
				t.Fatalf("the round sent after register was told %s", got[0])
			}
			h.WaitStatus(id, run.Completed)
			wantRound(t, h, id, round)
		})
	}
}

// Two processes both believe they run one run: the holder (a, live,
// registered) streams and finishes its round while a second process,
// unregistered, sends its own copy of the round's first reports (kept for
// its register). The holder's round is the caller's; the second process's
// kept reports are each refused, typed, once the run ends — before or
// after the second process registers — and it is not closed for it.
func TestOutsideKeptReportsOfARunItsHolderEnds(t *testing.T) {
	for _, registerFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("register first %v", registerFirst), func(t *testing.T) {
			h, a, id, thread := echoRunAccepted(t, 0xd5)
			a.Register("echo", "keep") // a serves more than the run's agent: not replaced by b
			round := roundFrames(id, thread)
			b := h.Connect(0xd5, nil)
			b.SendRaw(round[0])
			b.SendRaw(round[1])
			b.SendRaw(round[5])
			got := b.ReadBarrier()
			if registerFirst {
				got = append(got, registerSeeing(b, "echo")...) // takes echo; a keeps the run
				expectNotice(t, a, "echo", wire.TakenMessage)
			}
			for _, f := range round {
				a.SendRaw(f)
			}
			if rest := a.Barrier(); len(rest) > 0 {
				t.Fatalf("the holder was told %s", rest[0])
			}
			h.WaitStatus(id, run.Completed)
			if !registerFirst {
				got = append(got, registerSeeing(b, "echo")...)
				expectNotice(t, a, "echo", wire.TakenMessage)
			}
			got = append(got, b.Barrier()...)
			for _, e := range refusals(t, b, got, 3) {
				if e.RunID != id {
					t.Fatalf("told %+v", e)
				}
			}
			wantRound(t, h, id, round)
			if closed, err := b.Closed(); closed {
				t.Fatalf("the second process's link closed: %v", err)
			}
			a.None()
		})
	}
}

// An offer out to link a (room for 1) answered by link b of the key, then
// a is cut before it answers: the place kept for a goes with it (D15), so
// a's process, back on a new link, is offered the run waiting for room at
// once, and nothing is counted against the key.
func TestOutsideOfferedLinkCutAfterAnotherAnsweredIt(t *testing.T) {
	m := startMovedOffer(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	h, a, b, first, second := m.h, m.a, m.b, m.first, m.second
	b.Accept(first)
	h.WaitStatus(first, run.Running)
	a.Close()
	h.Eventually("a is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	// Declaring 2: the key's bucket is the last hello's (design.md §The
	// provider wire, "Capacity"), and the first run holds one place.
	back := h.Connect(0xe1, nodetest.Limit(2))
	back.Register("echo")
	if f := back.Offer(); f.RunID != second {
		t.Fatalf("offer %s, want %s", f.RunID, second)
	}
	back.Accept(second)
	h.WaitStatus(second, run.Running)
	b.Complete(first, m.thread)
	h.WaitStatus(first, run.Completed)
	b.None()
	h.Settle()
	if q := h.Quality(back.Key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// The offered link answers the offer another link took with an event of
// the run (a process that streams without acking): refused typed, stored
// nowhere in the caller's stream, and its place is then free.
func TestOutsideOfferedLinkAnswersAMovedOfferWithAnEvent(t *testing.T) {
	m := startMovedOffer(t, nil)
	h, a, b, first, second := m.h, m.a, m.b, m.first, m.second
	b.Accept(first)
	h.WaitStatus(first, run.Running)
	a.SendRaw(eventFrame(first, 1, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, m.thread, first)))
	if _, f := a.Next(); !refusalOf(f, first) {
		t.Fatalf("a's event answered %s, want its refusal", f)
	}
	if f := a.Offer(); f.RunID != second {
		t.Fatalf("offer %s, want %s", f.RunID, second)
	}
	if s := storedTypes(h, first); s != "" {
		t.Fatalf("stored %s from the link the run moved from", s)
	}
	m.end(t)
}

// Two processes of a key that funduq has never seen register at once (a
// deployment starting two replicas). Each must be answered registered:
// they are one key.
func TestOutsideFirstRegistersOfANewKeyAtOnce(t *testing.T) {
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			h := nodetest.Start(t, nil)
			a, b := h.Connect(0xd6, nil), h.Connect(0xd6, nil)
			var wg sync.WaitGroup
			for _, p := range []*nodetest.Prov{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "x"}}})
				}()
			}
			wg.Wait()
			for _, p := range []*nodetest.Prov{a, b} {
				typ, f := p.Next()
				if typ == wire.TypeError && strings.Contains(string(f), wire.ReplacedMessage) {
					continue // the first, replaced by the second
				}
				if typ != wire.TypeRegistered {
					t.Fatalf("a first register of the key, at once with another of its processes, answered %s", f)
				}
			}
		})
	}
}

// As TestOutsideReportsBeyondTheKeepBoundAreRefusedWhole, but the second
// process's reports arrive while the offer to the first is still out
// (not yet acked): they wait behind the offer (D15), the first then takes
// the run, and every report is answered once the second registers.
func TestOutsideReportsBehindAnOfferPastTheKeepBound(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second; c.LinkEventBacklog = 4 })
	a := h.Connect(0xd7, nil)
	a.Register("echo")
	id, thread := h.Door(a.Key, "echo", "", "q")
	a.Offer()
	round := roundFrames(id, thread)
	b := h.Connect(0xd7, nil)
	for _, f := range round[:4] {
		b.SendRaw(f)
	}
	got := b.ReadBarrier()
	a.Accept(id)
	h.WaitStatus(id, run.Running)
	h.Settle()
	got = append(got, registerSeeing(b, "echo")...) // replaces a
	got = append(got, b.Barrier()...)
	h.Settle()
	rows := storedRows(t, h, id)
	if len(got) != 4 {
		t.Fatalf("4 reports sent before register were answered %q, with %v stored; %s", got, rows, h.DescribeRun(id))
	}
	refusals(t, b, got, 4)
	if len(rows) > 0 {
		t.Fatalf("stored %v from refused reports", rows)
	}
}

// The hazard of D7's kept reports, from two live processes: the run
// paused on process a, the caller answered, and a accepted the new round
// while its lane was busy in a write (a slow PostgreSQL, a held lock).
// Meanwhile process b of the key, not yet registered, resends the old
// paused round (a raw provider resending what it believes unconfirmed) and
// registers the run's agent, replacing a. The stale round was read before
// b registered: it is never b's answer, and repeating an earlier round it
// must be refused typed (D7: "kept reports that repeat what an earlier
// round stored ... are refused"), the run running the caller's answer.
func TestOutsideStaleRoundReadBeforeRegisterBehindABusyLane(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("lane busy %v", busy), func(t *testing.T) {
			h, a, id, thread := echoRunAccepted(t, 0xd9)
			started, paused := pauseRawRound(h, a, id, thread)
			if _, err := h.Store.ReopenRun(t.Context(), store.Reopen{RunID: id}); err != nil {
				t.Fatal(err)
			}
			h.Taken(id)
			a.Offer()
			release := func() {}
			if busy {
				release = h.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
			}
			a.Accept(id) // the answered round, taken by the old process
			if busy {
				h.Eventually("the lane waits in its claim write", h.LockWaitsOn("runs"))
			} else {
				a.Barrier()
				h.Settle()
			}
			b := h.Connect(0xd9, nil)
			b.SendRaw(started)
			b.SendRaw(paused)
			b.Finish(id)
			got := b.ReadBarrier()
			got = append(got, registerSeeing(b, "echo")...) // replaces a
			release()
			h.Settle()
			got = append(got, b.Barrier()...)
			if r := h.Run(id); r.Status != run.Running {
				t.Fatalf("the answered run is %s with %s stored, want it running the answer's round; b was told %q",
					r.Status, storedTypes(h, id), got)
			}
			for _, e := range refusals(t, b, got, 3) {
				if e.RunID != id {
					t.Fatalf("error %+v, want a refusal naming %s", e, id)
				}
			}
		})
	}
}

// As TestOutsideTakerCutAtASeededStepOfARun, but the taker's link is not
// seen cut: it freezes where funduq cannot see it (open, silent), and the
// taker's process comes back on a new link, resends what it wrote before
// its register (kept for it, D7) and registers x, which replaces the
// frozen link. The older process, registered all along, is told nothing:
// x was taken from the frozen link, not from it. The caller sees the run
// complete with its round once, in order.
func TestOutsideFrozenTakerAtASeededStepOfARun(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x3c))
			cut := rng.IntN(8) // as in TestOutsideTakerCutAtASeededStepOfARun
			t.Logf("seed %d: frozen after step %d", seed, cut)
			h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
			older := h.Connect(0xda, nil)
			older.Register("x", "y")
			taker := h.Connect(0xda, nil)
			taker.Register("x")
			expectNotice(t, older, "x", wire.TakenMessage)
			id, thread := h.Door(older.Key, "x", "", "hi")
			if f := taker.Offer(); f.RunID != id {
				t.Fatalf("offer %s, want %s", f.RunID, id)
			}
			round := roundFrames(id, thread)
			var sent []string
			if cut >= 1 {
				sent = append([]string{fmt.Sprintf(`{"type":"ack","runId":%q}`, id)}, round[:cut-1]...)
			}
			for _, f := range sent {
				taker.SendRaw(f)
			}
			if got := taker.Barrier(); len(got) > 0 { // funduq has them; the process does not know
				t.Fatalf("taker told %s", got[0])
			}
			h.Settle()
			endedBefore := h.Run(id).Status.Terminal()
			back := h.Connect(0xda, nil)
			// Its ack too: read before register it is kept with the
			// reports behind it (TestOutsideAckBeforeRegisterIsKeptWithItsReports).
			resent := sent
			for _, f := range resent {
				back.SendRaw(f)
			}
			got := back.ReadBarrier()
			got = append(got, registerSeeing(back, "x")...) // replaces the frozen link
			var e wire.Error
			taker.Expect(wire.TypeError, &e)
			if e.Message != wire.ReplacedMessage {
				t.Fatalf("frozen link told %+v, want replaced", e)
			}
			switch {
			case cut == 0: // the offer out to the frozen link comes back to the key
				if f := back.Offer(); f.RunID != id {
					t.Fatalf("offer %s, want %s", f.RunID, id)
				}
				back.Accept(id)
				for _, f := range round {
					back.SendRaw(f)
				}
			case !endedBefore:
				for _, f := range round[cut-1:] {
					back.SendRaw(f)
				}
			}
			got = append(got, back.Barrier()...)
			if st := terminal(t, h, id); st != run.Completed {
				t.Fatalf("run %s, want completed: %s", st, h.DescribeRun(id))
			}
			refused := refusals(t, back, got, len(got))
			for _, e := range refused {
				// A resend of events funduq stored up to the round's
				// terminal event is taken as a resend
				// (TestOutsideKeptResendAfterTheTerminalEventIsTakenAsAResend).
				if e.RunID != id || !endedBefore {
					t.Fatalf("the process back, finishing the run it held, was told %+v", e)
				}
			}
			if endedBefore && len(refused) != len(resent) {
				t.Fatalf("resent %d reports, told %v", len(resent), refused)
			}
			wantRound(t, h, id, round)
			older.None()
			if q := h.Quality(older.Key); charges(q) != 0 {
				t.Fatalf("counted %+v against the key", q)
			}
		})
	}
}

// A second process's ack, read before its register, of a run another open
// link of its key holds: D15 counts an ack among the reports that are
// taken or answered, and D7 keeps a report read before register for such
// a run until that register. The events and finish behind the ack are
// kept, and taken once the register passes the run; the ack alone is
// refused "held by another link" as it is read. A raw provider that
// believes the refusal stops running a run funduq then passes to it and
// takes the rest of: the run stays running with nobody running it.
func TestOutsideAckBeforeRegisterIsKeptWithItsReports(t *testing.T) {
	h, a, id, thread := echoRunAccepted(t, 0xdb)
	a.Barrier()
	round := roundFrames(id, thread)
	b := h.Connect(0xdb, nil)
	b.Accept(id)
	b.SendRaw(round[0])
	got := append(b.ReadBarrier(), registerSeeing(b, "echo")...) // replaces a
	for _, f := range round[1:] {
		b.SendRaw(f)
	}
	got = append(got, b.Barrier()...)
	h.WaitStatus(id, run.Completed)
	wantRound(t, h, id, round)
	if len(got) > 0 {
		t.Fatalf("the process the run passed to was told %s", got[0])
	}
}

// A second process resends, before its register, events of a run another
// open link of its key holds, funduq having stored them up to the round's
// RUN_FINISHED (the finish not yet read). Kept, then taken once the
// register passes the run, each is the same text under the same seq: a
// resend, which D7 stores once and takes. Each is refused "the run already
// reported its end" instead, though stored: the provider is told "not
// taken" for what the caller has.
func TestOutsideKeptResendAfterTheTerminalEventIsTakenAsAResend(t *testing.T) {
	h, a, id, thread := echoRunAccepted(t, 0xdc)
	round := roundFrames(id, thread)
	for _, f := range round[:5] {
		a.SendRaw(f)
	}
	if got := a.Barrier(); len(got) > 0 {
		t.Fatalf("holder told %s", got[0])
	}
	b := h.Connect(0xdc, nil)
	for _, f := range round[:5] {
		b.SendRaw(f)
	}
	got := append(b.ReadBarrier(), registerSeeing(b, "echo")...) // replaces a
	b.SendRaw(round[5])
	got = append(got, b.Barrier()...)
	h.WaitStatus(id, run.Completed)
	wantRound(t, h, id, round)
	if len(got) > 0 {
		t.Fatalf("the resend of stored events was told %s", got[0])
	}
}

// A second process pipelines, before its register, a resend kept for it
// (another open link holds the run) and a query per run it holds — nine
// here, one past a link's eight query places — and then its register,
// never waiting on an answer. Each query is answered once the reports
// before it are taken or refused, which the kept resend is only at the
// register; the ninth stops the link being read until a place frees. The
// provider waits on nothing, so funduq must read its register.
func TestOutsideQueriesBehindAKeptResendDoNotHoldTheRegister(t *testing.T) {
	h, a, id, thread := echoRunAccepted(t, 0xdd)
	a.Barrier()
	round := roundFrames(id, thread)
	b := h.Connect(0xdd, nil)
	b.SendRaw(round[0])
	for i := range 9 {
		b.SendRaw(fmt.Sprintf(`{"type":"query","queryId":"q%d","method":"thread_messages","params":{"threadId":%q}}`, i, thread))
	}
	b.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "echo"}}})
	answers, registered := 0, false
	for !registered || answers < 9 {
		typ, f := b.Next()
		switch typ {
		case wire.TypeRegistered:
			registered = true
		case wire.TypeQueryResult:
			answers++
		default:
			t.Fatalf("unexpected frame: %s", f)
		}
	}
	for _, f := range round[1:] {
		b.SendRaw(f)
	}
	if got := b.Barrier(); len(got) > 0 {
		t.Fatalf("told %s", got[0])
	}
	h.WaitStatus(id, run.Completed)
	wantRound(t, h, id, round)
}

// The offer to a (room for 1) moved to b, which runs the run to its end
// before a answers; a's answer then comes for a run that has ended. D15:
// a's place is free once it answers, "refused or taken", and the run
// waiting for that place is offered at once — not at the moved offer's
// deliver_timeout.
func TestOutsideMovedOfferAnsweredAfterTheRunEnded(t *testing.T) {
	m := startMovedOffer(t, nil)
	h, a, b, first, second := m.h, m.a, m.b, m.first, m.second
	b.Accept(first)
	b.Complete(first, m.thread)
	h.WaitStatus(first, run.Completed)
	h.Settle()
	a.Accept(first)
	if _, f := a.Next(); !refusalOf(f, first) {
		t.Fatalf("a's ack answered %s, want its refusal", f)
	}
	if f := a.Offer(); f.RunID != second {
		t.Fatalf("offer %s, want %s", f.RunID, second)
	}
	a.Accept(second)
	h.WaitStatus(second, run.Running)
}

// A link whose every agent was taken by another link of its key or
// deleted serves nothing and holds nothing: design.md §The provider wire,
// "Admission", makes such a link pending again and closes it at a register
// deadline from then, so that links serving nothing stay bounded. Here the
// older link's x was taken (it went on serving y, so it was not replaced)
// and it then deleted y.
func TestOutsideLinkLeftServingNothingByATakeAndADeleteIsPendingAgain(t *testing.T) {
	h := nodetest.Start(t, nil)
	older := h.Connect(0xde, nil)
	older.Register("x", "y")
	newer := h.Connect(0xde, nil)
	newer.Register("x")
	expectNotice(t, older, "x", wire.TakenMessage)
	older.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "y"})
	older.Expect(wire.TypeDeleted, nil)
	h.Advance(h.Cfg.RegisterDeadline + time.Second)
	older.Rest()
	_, err := older.Closed()
	if ce, ok := err.(*websocket.CloseError); !ok || ce.Code != websocket.ClosePolicyViolation {
		t.Fatalf("the link serving nothing closed with %v, want 1008 at its register deadline", err)
	}
	newer.None()
}

// The taker of x is lost mid-run and its process never comes back; the
// older process of the key takes x back when told it is free (our SDK's
// way), which re-attaches the run (D5) but knows nothing of it. The
// caller is not left with a run running for good: at the link grace from
// that re-attach it fails provider_left_holding_it, with funduq's
// RUN_ERROR after what was stored, and the older link is not closed.
func TestOutsideLostTakerNeverBackFailsItsRunVisibly(t *testing.T) {
	const grace = 5 * time.Second
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = grace })
	older := h.Connect(0xdf, nil)
	older.Register("x", "y")
	taker := h.Connect(0xdf, nil)
	taker.Register("x")
	expectNotice(t, older, "x", wire.TakenMessage)
	id, thread := h.Door(older.Key, "x", "", "hi")
	taker.Offer()
	taker.Accept(id)
	round := roundFrames(id, thread)
	taker.SendRaw(round[0])
	taker.SendRaw(round[1])
	taker.Barrier()
	taker.Close()
	h.Eventually("the taker's link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	expectNotice(t, older, "x", wire.FreedMessage)
	older.Register("x", "y")
	h.Advance(grace - time.Millisecond)
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("run %s before the grace from the re-attach ended", r.Status)
	}
	h.Advance(time.Millisecond)
	r := h.WaitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
		t.Fatalf("failed %s", r.FailureReason)
	}
	if s := storedTypes(h, id); s != "RUN_STARTED TEXT_MESSAGE_START RUN_ERROR" {
		t.Fatalf("stored %s, want what the taker sent and funduq's RUN_ERROR", s)
	}
	older.None()
}

// The holder of a run is lost while a second process of its key, not yet
// registered, has a resend of the run kept for its register (D7). The
// holder gone, the kept reports need wait no more: the run is held for the
// key (D5) and the resend re-adopts it; the second process then registers
// and finishes the round. The caller sees the round once, in order.
func TestOutsideHolderLostWhileAResendIsKept(t *testing.T) {
	h, a, id, thread := echoRunAccepted(t, 0xe0)
	round := roundFrames(id, thread)
	a.SendRaw(round[0])
	a.SendRaw(round[1])
	a.Barrier()
	b := h.Connect(0xe0, nil)
	for _, f := range round[:3] {
		b.SendRaw(f)
	}
	got := b.ReadBarrier()
	h.Settle() // kept
	a.Close()
	h.Eventually("the holder is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	h.Settle()
	got = append(got, registerSeeing(b, "echo")...)
	for _, f := range round[3:] {
		b.SendRaw(f)
	}
	got = append(got, b.Barrier()...)
	if len(got) > 0 {
		t.Fatalf("told %s", got[0])
	}
	h.WaitStatus(id, run.Completed)
	wantRound(t, h, id, round)
	if q := h.Quality(b.Key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// x is taken from the older link while an offer of x's run is out to it.
// The older process, told x is taken, declines the offer as a process that
// no longer serves x: the decline counts nothing (the link no longer
// serves the agent, D18) and the run goes to the newer link at once.
func TestOutsideOfferOutWhenItsAgentIsTakenIsDeclinedUncounted(t *testing.T) {
	h := nodetest.Start(t, nil)
	older := h.Connect(0xe2, nodetest.Limit(1))
	older.Register("x", "y")
	id, thread := h.Door(older.Key, "x", "", "hi")
	if f := older.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
	newer := h.Connect(0xe2, nil)
	newer.Register("x")
	expectNotice(t, older, "x", wire.TakenMessage)
	older.Decline(id)
	if f := newer.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
	newer.Accept(id)
	newer.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	older.None()
	if q := h.Quality(older.Key); charges(q) != 0 {
		t.Fatalf("counted %+v against the key for a decline of a taken agent's offer", q)
	}
}

// Two processes of one key: j serves x and deletes it while i registers
// x, PostgreSQL slow on x's row (a held lock) so that both writes wait
// there together. Either order is fair — deleted then registered (x
// served by i, its record written again), or registered then refused (x
// served by i, the delete refused as a sibling's) — but x served by i
// must have its record: a run of x is a row that references it, and the
// listing is read from it.
func TestOutsideDeleteRacingAnotherLinksRegisterKeepsTheRecord(t *testing.T) {
	h := nodetest.Start(t, nil)
	j := h.Connect(0xe3, nil)
	j.Register("x", "b")
	i := h.Connect(0xe3, nil)
	i.Register("a")
	release := h.Hold(`SELECT 1 FROM agents WHERE provider_key = $1 AND name = 'x' FOR UPDATE`, j.Key)
	j.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "x"})
	h.Eventually("the delete waits on x's row", h.LockWaitsOn("agents"))
	i.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "x"}, {Name: "a"}}})
	h.Eventually("the register waits on x's row too", func() bool {
		var n int
		err := h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n >= 2
	})
	release()
	typ, f := j.Next()
	t.Logf("j's delete answered %s", f)
	i.Expect(wire.TypeRegistered, nil)
	got := append(i.ReadBarrier(), j.ReadBarrier()...)
	t.Logf("then told %q (delete answered %s)", got, typ)
	if served := servedNames(h, i.Key); !slices.Contains(served, "x") {
		t.Fatalf("served %v, want x served by the link that registered it last", served)
	}
	var recorded bool
	if err := h.DB().QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM agents WHERE provider_key = $1 AND name = 'x')`,
		i.Key).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if !recorded {
		t.Fatalf("x is served by i but its record is gone (delete answered %s): its runs cannot be written, nor is it listed", f)
	}
	id, thread := h.Door(i.Key, "x", "", "hi")
	if f := i.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
	i.Accept(id)
	i.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
}
