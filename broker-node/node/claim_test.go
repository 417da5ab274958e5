package node_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// A provider that answers an offer with its accept, its whole stream and
// its finish in one burst (as the SDK does for a quick agent) gets the
// same record as one that paces them: completed, every event once and in
// order — resends within the burst stored once — and the answer folded
// onto the thread. The broker may write the claim, the events and the end
// in one transaction (then started_at and completed_at are that
// transaction's one time); either way the record must read the same.
func TestAcceptBurstIsRecordedInOrder(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	combined := 0
	for i := range 5 {
		id, thread := h.Door(p.Key, "echo", "", fmt.Sprint("burst ", i))
		if f := p.Offer(); f.RunID != id {
			t.Fatalf("offer %s, want %s", f.RunID, id)
		}
		seq := func(n int64) *int64 { return &n }
		p.Accept(id)
		evs := []string{
			fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id),
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`,
			`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
			fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id),
		}
		for j, ev := range evs {
			p.Send(wire.Event{Type: wire.TypeEvent, RunID: id, Event: json.RawMessage(ev), ProviderSeq: seq(int64(j + 1))})
			if j == 2 { // a resend inside the burst
				p.Send(wire.Event{Type: wire.TypeEvent, RunID: id, Event: json.RawMessage(ev), ProviderSeq: seq(int64(j + 1))})
			}
		}
		p.Finish(id)
		r := h.WaitStatus(id, run.Completed)
		got := h.Events(id)
		if len(got) != len(evs) || r.LastSeq != len(evs) || r.RoundSeq != 0 || r.StartedAt == nil {
			t.Fatalf("run %d: %d events stored (last seq %d, round %d, started %v), want %d", i, len(got), r.LastSeq, r.RoundSeq, r.StartedAt, len(evs))
		}
		for j, ev := range got {
			var want map[string]any
			_ = json.Unmarshal([]byte(evs[j]), &want)
			if ev["type"] != want["type"] {
				t.Fatalf("run %d: event %d is %v, want %v", i, j+1, ev["type"], want["type"])
			}
		}
		msgs, _ := h.Store.ThreadMessages(t.Context(), thread, 0)
		if len(msgs) != 2 {
			t.Fatalf("run %d: thread has %d messages, want the caller's and the agent's", i, len(msgs))
		}
		if r.StartedAt.Equal(*r.CompletedAt) {
			combined++
		}
	}
	t.Logf("%d of 5 bursts were written as one transaction", combined)
	h.Settle()
	if got := h.Node.Broker.Snapshot().InFlight[p.Key]; got != 0 {
		t.Fatalf("place not given back: in flight %d", got)
	}
}

// A queued notice that arrives after its run was settled (a catch-up read
// it first and its lane ran it to the end) offers nothing: the broker
// remembers the runs it saw end. For one it does not (settled before this
// broker led, or long ago) the offer goes out beside the offering write,
// which the record refuses: the offer is withdrawn with a cancel, an
// answer to it changes nothing, and the lane closes holding no place.
func TestLateQueuedNoticeOffersNothing(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread, r := h.CompletedRun(p, "echo", "hi")
	h.Settle()

	// A run this broker never saw: settled in the record already.
	old := run.NewRunID()
	if _, err := h.Store.Pool().Exec(t.Context(), `INSERT INTO runs (run_id, thread_id, provider_key, agent_name, status, run_input, completed_at)
		VALUES ($1, $2, $3, 'echo', 'completed', '{}', now())`, old, thread, p.Key); err != nil {
		t.Fatal(err)
	}
	for _, late := range []string{id, old} {
		payload := store.QueuedPayload(store.NewRun{RunID: late, ThreadID: thread, ProviderKey: p.Key, AgentName: "echo", RunInput: r.RunInput})
		if _, err := h.Store.Pool().Exec(t.Context(), `SELECT pg_notify($1, $2)`, store.ChannelRunQueued, payload); err != nil {
			t.Fatal(err)
		}
	}
	// Notices arrive in commit order on the one listening connection: the
	// run this broker saw end is not offered; the other is, and taken back.
	if f := p.Offer(); f.RunID != old {
		t.Fatalf("offer %s, want %s (the run this broker ended was offered again)", f.RunID, old)
	}
	var c wire.Cancel
	p.Expect(wire.TypeCancel, &c)
	if c.RunID != old {
		t.Fatalf("cancel for %s, want the withdrawn %s", c.RunID, old)
	}
	p.Accept(old) // sent before the withdrawal reached the provider: answered (D15)
	expectRefusal(t, p, old, "ack refused")
	id2, thread2 := h.Door(p.Key, "echo", "", "next")
	if f := p.Offer(); f.RunID != id2 {
		t.Fatalf("offer %s, want %s", f.RunID, id2)
	}
	h.Eventually("the late notices' lanes close", func() bool {
		lanes := h.Node.Broker.Snapshot().Lanes
		_, open := lanes[id]
		_, openOld := lanes[old]
		return !open && !openOld
	})
	p.Accept(id2)
	p.Complete(id2, thread2)
	h.WaitStatus(id2, run.Completed)
	p.None()
	if got := h.Node.Broker.Snapshot().InFlight[p.Key]; got != 0 {
		t.Fatalf("the late notice holds a place: in flight %d", got)
	}
	if cur := h.Run(id); cur.Status != run.Completed || cur.LastSeq != r.LastSeq {
		t.Fatalf("the settled run changed: %s, last seq %d", cur.Status, cur.LastSeq)
	}
	if cur := h.Run(old); cur.Status != run.Completed || cur.LastSeq != 0 {
		t.Fatalf("the withdrawn run changed: %s, last seq %d", cur.Status, cur.LastSeq)
	}
}

// An offering write whose earlier attempt landed but whose answer was lost
// (the record already says offering under this epoch) counts as written:
// the offer stands and the run completes, rather than being withdrawn.
func TestOfferingAlreadyRecordedCountsAsWritten(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe2, nodetest.Limit(1))
	p.Register("echo")
	a, threadA := h.Door(p.Key, "echo", "", "first")
	p.Offer()
	p.Accept(a)
	h.WaitStatus(a, run.Running)
	// The second run waits for the provider's one place.
	id, _ := h.Door(p.Key, "echo", "", "second")
	h.Eventually("the second run's lane is open", func() bool {
		_, ok := h.Node.Broker.Snapshot().Lanes[id]
		return ok
	})
	// Stands for the lost answer: the record moved, the lane never heard.
	if _, err := h.Store.Pool().Exec(t.Context(), `UPDATE runs SET status = 'offering' WHERE run_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	p.Complete(a, threadA)
	h.WaitStatus(a, run.Completed)
	f := p.Offer()
	if f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
	p.Accept(id)
	p.Complete(id, *f.ThreadID)
	h.WaitStatus(id, run.Completed)
	p.None() // no withdrawal followed the offer
}
