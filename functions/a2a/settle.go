package a2a

import (
	"context"
	"encoding/json"
	"time"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// waitRecord, for a blocking send, follows the run until it settles
// (terminal or input-required), the block budget or the request's deadline
// passes. settled reports that view is the settled run's task view; else
// rn is the run as read last, or as accepted.
//
// The tail's events are folded as they are relayed, so the settled view
// reads only what the tail did not: the run, its messages, and its events
// up to where the tail started (none for a run this request wrote) — each
// stored event is read once (issue #19). For a run this request wrote,
// whose round's end marker carries the outcome, it reads nothing
// (markedView).
func (c *call) waitRecord(acc accepted, blocking bool) (view taskView, rn store.Run, settled bool) {
	if !blocking {
		return taskView{}, acc.run, false
	}
	ctx := c.r.Context()
	tailed := newFold(-1, true)
	t := &door.Tail{O: c.h.o.Tail, RunID: acc.run.RunID, ThreadID: acc.run.ThreadID, ProviderKey: acc.run.ProviderKey, After: acc.after, Fresh: acc.fresh,
		Relay: func(seq int, ev json.RawMessage) bool {
			typ := tailed.add(seq, ev).Type
			return typ == agui.TypeRunFinished || typ == agui.TypeRunError
		}}
	budget := c.h.streamEnd(ctx, c.h.o.BlockBudget)
	end := t.Run(ctx, budget)
	if end == door.TailStopped || end == door.TailSettled {
		// The round's end marker (published right after the end's commit;
		// it usually trails the terminal event by a Redis round trip, or
		// came with it): read before the end is recorded, the record would
		// have to be read again, and the marker may make reading it needless.
		deadline := time.Now().Add(t.O.SettleWait)
		m, marked := t.Marker()
		if !t.Ended() && t.O.Feed != nil {
			m, marked = door.WaitMarker(ctx, t.O.Feed, t.RunID, t.After, min(t.O.PollInterval, t.O.SettleWait))
		}
		if marked {
			if v, cur, ok := markedView(acc, t, m, tailed); ok {
				return v, cur, true
			}
		}
		for {
			v, cur, err := c.settleRecord(ctx, t, acc.after, tailed, deadline)
			if err != nil {
				break
			}
			if door.Settled(cur.Status) {
				return v, cur, true
			}
			// The terminal event is stored but the end is not recorded
			// within the settle wait: the leader that stored it went
			// away, and the next one records it as it takes over (D7).
			// The answer is still owed: follow the record until it
			// settles or the block budget ends.
			follow := &door.Tail{O: c.h.o.Tail, RunID: acc.run.RunID, ThreadID: acc.run.ThreadID, ProviderKey: acc.run.ProviderKey, After: t.After,
				Relay: func(int, json.RawMessage) bool { return true }}
			if e := follow.Run(ctx, budget); e == door.TailBudget || e == door.TailGone {
				return taskView{}, cur, false
			}
			deadline = time.Now().Add(t.O.SettleWait)
		}
	}
	rctx, cancel := door.Step(context.WithoutCancel(ctx))
	defer cancel()
	if cur, err := c.h.o.Store.GetRun(rctx, acc.run.RunID); err == nil {
		return taskView{}, cur, false
	}
	return taskView{}, acc.run, false
}

// markedView is the settled task view of a run this request wrote, told
// by its round's end marker instead of a read of the record: the broker
// publishes the marker after the end's commit (design.md D9) with what
// that commit recorded — the status, the failure reason, the pause
// payload, last_activity_at, the agent's messages with the ids it minted
// — and the tail relayed (and tailed folded) every event of the run from
// seq 1, stored before they were published. With the caller's messages
// this request recorded, that is the whole record the view is built from,
// so the view is the one settleRecord would read. ok is false, and the
// record is read, unless all of it holds: a marker from an older broker,
// or one whose outcome was over its cap, carries no outcome; a marker of
// another round than the one the tail stopped on is not this answer's.
func markedView(acc accepted, t *door.Tail, m livefeed.Entry, tailed *eventFold) (taskView, store.Run, bool) {
	if !acc.fresh || acc.after != 0 || m.Outcome == nil || tailed.last != t.After || m.Seq != t.After {
		return taskView{}, store.Run{}, false
	}
	o, err := livefeed.ParseOutcome(m.Outcome)
	status := run.Status(o.Status)
	if err != nil || o.Status != m.End || o.LastSeq != m.Seq || !status.Valid() || !door.Settled(status) {
		return taskView{}, store.Run{}, false
	}
	// The run as the end's commit left it; only what a task view reads
	// (and the status the send tests) is taken from the outcome.
	r := acc.run
	r.Status, r.FailureReason, r.LastSeq, r.LastActivityAt = status, o.FailureReason, o.LastSeq, o.LastActivityAt
	r.Interrupt = nil
	if status == run.InputRequired {
		r.Interrupt = o.Interrupt
	}
	// The run's messages in the record's order: the caller's, written
	// with the run, then the agent's, written with its end.
	msgs := make([]store.RunMessage, 0, len(acc.msgs)+len(o.Messages))
	for _, cm := range acc.msgs {
		msgs = append(msgs, store.RunMessage{MessageID: cm.MessageID, Message: cm.Message, Origin: "caller"})
	}
	for _, am := range o.Messages {
		msgs = append(msgs, store.RunMessage{MessageID: am.ID, Message: am.Message, Origin: "agent"})
	}
	f := newFold(-1, true)
	f.then(tailed)
	return f.view(r, msgs), r, true
}

// settleRecord is door.Tail.Settle reading the rest of the record each
// time: it waits, after a terminal event, until the broker has recorded
// the run's outcome or the settle wait passes, and returns the task view
// of the run as read last — so a settled answer costs one read, not a
// status read and then its events and messages. t has run (its options
// carry their defaults) from seq after; tailed folded what it relayed.
// The caller has waited for the round's end marker first, within the same
// settle wait, which ends at deadline.
func (c *call) settleRecord(ctx context.Context, t *door.Tail, after int, tailed *eventFold, deadline time.Time) (taskView, store.Run, error) {
	o, st := t.O, c.h.o.Store
	for {
		dctx, cancel := context.WithTimeout(ctx, 2*door.StepBound(ctx))
		// The run first, then the events before the tail's (a settled
		// run's are all stored by then), then its messages.
		sctx, scancel := door.Step(dctx)
		rec, err := st.ReadRecord(sctx, store.RecordRead{RunID: t.RunID, Run: true, UpTo: after, Limit: recordPage})
		scancel()
		if err == nil && door.Settled(rec.Run.Status) {
			f := newFold(-1, true)
			if f.page(rec.Events) {
				err = f.rest(dctx, st, t.RunID, f.last, after)
			}
			f.then(tailed)
			// Nothing is stored after a run's terminal event (design.md
			// §The status machine), where the tail stopped; should a
			// record say otherwise, its view has the rest.
			if err == nil && rec.Run.LastSeq > f.last {
				err = f.rest(dctx, st, t.RunID, f.last, rec.Run.LastSeq)
			}
			cancel()
			if err == nil {
				return f.view(rec.Run, rec.Messages), rec.Run, nil
			}
		} else {
			cancel()
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return taskView{}, rec.Run, err
		}
		door.WaitEnd(ctx, o.Feed, t.RunID, t.After, min(o.PollInterval, left))
	}
}
