package node_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A provider's link is cut after it accepted a run, its first events lost
// with the link and the broker not yet aware the link is gone. Its next
// link of the same key resends those events, then, the old link seen gone,
// goes on with the rest of the round: a caller reads the whole round.
// Registered first, the new link replaces the old one (D5) and the run
// passes to it at its first report.
func TestRoundResentOnANewLinkBeforeTheOldOneIsSeenGone(t *testing.T) {
	got, stored := roundAcrossACut(t, 0xe7, true)
	if len(stored) != roundLen {
		t.Fatalf("stored %s, want the whole round of %d events; errors to the new link: %q", strings.Join(stored, " "), roundLen, got)
	}
}

// The same with the resend read before the new link's register (a raw
// provider, or our SDK's paused round, design.md D7): the old link being
// alive as far as the broker knows, the resend was refused "held by
// another link", the register then replaced the old link, the run passed
// to the new one, and the rest of the round was stored after a hole — the
// caller streamed a round with its first events missing. The resend is
// kept for the register, which passes the run to the new link: it is
// stored first, the round whole.
func TestRoundResentBeforeRegisterWhileTheOldLinkSeemsAlive(t *testing.T) {
	got, stored := roundAcrossACut(t, 0xe8, false)
	if len(stored) != roundLen {
		t.Fatalf("stored %s, want the whole round of %d events; errors to the new link: %q", strings.Join(stored, " "), roundLen, got)
	}
}

const roundCut, roundLen = 3, 7 // events lost with the cut; the whole round, RUN_FINISHED included

// roundAcrossACut runs the cut of the tests above with a raw provider of
// key seed: link a accepts a run and is cut with nothing of the round read
// (its socket stays open: the broker has not seen it go), link b resends
// events 1..roundCut (after its register when regFirst), then a is closed
// and b sends the rest of the round and its finish. It returns the errors
// b was sent and the stored events as type/value.
func roundAcrossACut(t *testing.T, seed byte, regFirst bool) (errs, stored []string) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	a := h.Connect(seed, nil)
	a.Register("echo")
	id, thread := h.Door(a.Key, "echo", "", "q")
	a.Offer()
	a.Accept(id)
	a.Barrier() // claimed by a
	ev := func(seq int) string {
		switch seq {
		case 1:
			return fmt.Sprintf(`{"type":"event","runId":%q,"seq":1,"event":{"type":"RUN_STARTED","threadId":%q,"runId":%q}}`, id, thread, id)
		case roundLen:
			return fmt.Sprintf(`{"type":"event","runId":%q,"seq":%d,"event":{"type":"RUN_FINISHED","threadId":%q,"runId":%q}}`, id, seq, thread, id)
		}
		return fmt.Sprintf(`{"type":"event","runId":%q,"seq":%d,"event":{"type":"CUSTOM","name":"n","value":%d}}`, id, seq, seq)
	}
	b := h.Connect(seed, nil)
	if regFirst {
		b.Register("echo")
	}
	for s := 1; s <= roundCut; s++ {
		b.SendRaw(ev(s))
	}
	var got [][]byte
	if regFirst {
		got = b.Barrier()
	} else {
		got = append(b.ReadBarrier(), registerSeeing(b, "echo")...)
	}
	a.Close() // replaced by b's register either way, and found dead
	h.Eventually("the old link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	for s := roundCut + 1; s <= roundLen; s++ {
		b.SendRaw(ev(s))
	}
	b.Finish(id)
	got = append(got, b.Barrier()...)
	h.WaitStatus(id, run.Completed)
	for _, f := range got {
		if typ, _ := wire.PeekType(f); typ == wire.TypeError {
			var e wire.Error
			_ = json.Unmarshal(f, &e)
			errs = append(errs, e.Message)
		}
	}
	for _, e := range h.Events(id) {
		stored = append(stored, fmt.Sprint(e["type"], "/", e["value"]))
	}
	return errs, stored
}

// The paused-round form of the cut above, the one our SDK takes (design.md
// D7: it writes a paused round it holds right after welcome, before
// register). The round's frames were lost with the old link, which the
// broker still thinks alive. The resend was refused "held by another
// link" and not stored; the register then replaced the old link and the
// run passed to the new one, which had nothing more to say for it: it
// stayed running with nothing stored, for good (no clock fails a quiet
// run, §Timers), its question never asked. Kept for the register, the
// round is taken when the run passes, and the run pauses on it, as D7
// says a paused round lost with its link does.
func TestPausedRoundResentBeforeRegisterWhileTheOldLinkSeemsAlive(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	a := h.Connect(0xe9, nil)
	a.Register("echo")
	id, thread := h.Door(a.Key, "echo", "", "q")
	a.Offer()
	a.Accept(id)
	a.Barrier() // claimed by a; its round is then lost with it
	b := h.Connect(0xe9, nil)
	b.SendRaw(fmt.Sprintf(`{"type":"event","runId":%q,"seq":1,"event":{"type":"RUN_STARTED","threadId":%q,"runId":%q}}`, id, thread, id))
	b.SendRaw(fmt.Sprintf(`{"type":"event","runId":%q,"seq":2,"event":{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int_1","reason":"confirm"}]}}}`, id, thread, id))
	b.Finish(id)
	got := append(b.ReadBarrier(), registerSeeing(b, "echo")...) // replaces a: funduq closes it, draining
	a.Close()
	// b's register passed the run to b, with the round it kept for it.
	h.Eventually("the old link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	h.Settle()
	if r := h.Run(id); r.Status != run.InputRequired {
		var errs []string
		for _, f := range got {
			errs = append(errs, string(f))
		}
		t.Fatalf("run is %s (%s), stored %s: want it paused on the resent round; the new link was told %s",
			r.Status, r.FailureReason, storedTypes(h, id), strings.Join(errs, " "))
	}
}

// registerSeeing registers names on p and returns the frames read before
// its registered: the answers to what p sent before its register may come
// first. A query would not do before it: one read behind reports kept for
// the link's register is answered only once they are taken or refused
// (design.md D7).
func registerSeeing(p *nodetest.Prov, names ...string) [][]byte {
	var regs []wire.Registration
	for _, n := range names {
		regs = append(regs, wire.Registration{Name: n})
	}
	p.Send(wire.Register{Type: wire.TypeRegister, Agents: regs})
	var before [][]byte
	for {
		typ, f := p.Next()
		if typ == wire.TypeRegistered {
			return before
		}
		before = append(before, f)
	}
}
