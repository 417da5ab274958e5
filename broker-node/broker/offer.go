package broker

import (
	"context"
	"errors"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// try is the try predicate and, when it holds, the offer: not dispatched,
// its thread's head, its agent served, and a place on the provider — the
// place taken in the same step as the check.
func (l *lane) try(ctx context.Context) {
	b := l.b
	b.mu.Lock()
	l.dispatchPending = false
	if l.ended || l.offeredTo != nil || l.claimedBy != nil || l.orphan {
		b.mu.Unlock()
		return
	}
	ls := b.interjectionTargetLocked(l)
	if ls == nil {
		dq := b.threads[l.threadID]
		if len(dq) == 0 || dq[0] != l {
			b.mu.Unlock()
			return
		}
		ls = b.served[l.agent]
	}
	if ls == nil {
		b.mu.Unlock()
		return
	}
	bk := b.bucketFor(ls.key)
	kept := l.reserved == ls.key // keepPlace: the offer takes the kept place
	if (!kept && !bk.hasRoom()) || !b.linkHasRoomLocked(ls) {
		b.mu.Unlock()
		return
	}
	if kept {
		l.reserved = ""
	} else {
		bk.inFlight++
	}
	b.holdLocked(l, l.claimedBy, ls)
	b.mu.Unlock()

	threadID := l.threadID
	// The clock starts before the frame leaves: an answer can never beat it.
	l.offerSeq++
	id := l.offerSeq
	stalls, resumed := ls.stall.since()
	l.offer = &offerState{id: id, link: ls, sent: time.Now(), due: b.clock.Now().Add(b.set.DeliverTimeout), stalls: stalls, stalled: resumed != nil}
	l.offer.timer = b.clock.AfterFunc(b.set.DeliverTimeout, func() { l.q.push(lapseCmd{id}) })
	frame, err := wire.Marshal(wire.NewRunFrame(wire.DeliveredRun{RunID: l.id, AgentName: l.agent.Name,
		RunInput: l.input, ThreadID: &threadID}))
	if err == nil {
		// Written by this goroutine when the link is idle: the writer's
		// wake-up was the longest step between the notice and the frame.
		err = ls.link.SendNow(frame)
	}
	if err != nil {
		l.log.WarnContext(ctx, "offer could not be sent; the run stays queued", "link", ls.id, "err", err)
		l.dropOffer()
		return
	}
	b.metrics.offers.WithLabelValues("sent").Inc()
	l.log.DebugContext(ctx, "run offered", "link", ls.id)
	if d := b.set.OfferingAfter; d > 0 {
		// The record says offering only once the offer has been out for
		// d with no answer (writeOffering): most answers come first, and
		// a claim from queued is legal (D7), so the fast path is one
		// status write, not two. Real time, as lapseSlack: it is no
		// protocol clock.
		l.offer.unwritten = true
		time.AfterFunc(d, func() { l.q.push(offeringDueCmd{id}) })
		return
	}
	l.writeOffering(ctx, ls)
}

// writeOffering records the offer that is out: the run is offering. The
// frame leaves before the write is made, so the two go out side by side
// and the provider does not wait for PostgreSQL. Nothing the provider
// answers is read before the write has returned (the lane reads its queue
// after try, and an answer behind a due write waits for it), so every
// verdict still meets the run as the lane knows it. A refused write takes
// the offer back.
func (l *lane) writeOffering(ctx context.Context, ls *linkState) {
	b := l.b
	if err := l.move(ctx, run.Offering); err != nil {
		l.dropOffer()
		l.retractOffer(ctx, ls, err)
		if noLongerQueued(run.Offering, err) {
			// The run is not waiting any more (read as queued after its
			// lane had already run it): the record is the truth.
			l.log.InfoContext(ctx, "run is no longer queued; its lane closes", "err", err)
			b.forget(l)
		}
	}
}

// onOfferingDue writes offering for the offer still out unanswered after
// Settings.OfferingAfter.
func (l *lane) onOfferingDue(ctx context.Context, c offeringDueCmd) {
	if l.offer == nil || l.offer.id != c.offer || !l.offer.unwritten {
		return // answered, or lapsed, first: nothing to record
	}
	l.offer.unwritten = false
	l.writeOffering(ctx, l.offer.link)
}

// recorded is the status the record holds for an offer: offering once
// written, else still queued.
func (o *offerState) recorded() run.Status {
	if o != nil && o.unwritten {
		return run.Queued
	}
	return run.Offering
}

// dropOffer ends an offer that never counted: its clock stops and its
// place comes back; the record was not moved.
func (l *lane) dropOffer() {
	l.offer.timer.Stop()
	l.offer = nil
	l.releasePlace()
}

// retractOffer takes back an offer whose offering write was refused: the
// provider is asked to cancel the run (a cancel for a run it never took
// is a no-op for it), and whatever it answers finds no offer out. A
// broker that lost its epoch or its context closes the links instead.
func (l *lane) retractOffer(ctx context.Context, ls *linkState, err error) {
	if ctx.Err() != nil || errors.Is(err, store.ErrStaleEpoch) {
		return
	}
	// The metric's label predates the word; dashboards read it.
	l.b.metrics.offers.WithLabelValues("withdrawn").Inc()
	frame, _ := wire.Marshal(wire.Cancel{Type: wire.TypeCancel, RunID: l.id})
	if err := ls.link.Send(frame); err != nil {
		l.log.WarnContext(ctx, "offer retraction could not be sent", "link", ls.id, "err", err)
		return
	}
	l.log.InfoContext(ctx, "offer retracted: the record refused it", append(l.keyAttr(ls.key), "link", ls.id)...)
}

func (l *lane) releasePlace() {
	b := l.b
	b.mu.Lock()
	if l.offeredTo != nil {
		b.bucketFor(l.offeredTo.key).release()
		b.holdLocked(l, l.claimedBy, nil)
	}
	b.mu.Unlock()
}

// handBack ends the offer without a claim: the place comes back and the run
// is queued again. Nothing re-nudges it; it waits for something to change.
// It reports whether the provider had room after the release: its key and
// the link the offer went to, each under its own declaration.
func (l *lane) handBack(ctx context.Context) (room bool) { return l.handBackKeeping(ctx, 0) }

// handBackKeeping is handBack, except that the run keeps its place on the
// offer's key for keep (keepPlace), in the same step as the release: no
// other run of the key takes the place meanwhile.
func (l *lane) handBackKeeping(ctx context.Context, keep time.Duration) (room bool) {
	written := true
	if l.offer != nil {
		l.offer.timer.Stop()
		written = l.offer.recorded() == run.Offering
		l.offer = nil
	}
	b := l.b
	b.mu.Lock()
	if l.offeredTo != nil {
		ls := l.offeredTo
		bk := b.bucketFor(ls.key)
		bk.release()
		b.holdLocked(l, l.claimedBy, nil)
		l.keepPlaceLocked(ls.key, keep) // none when keep is 0
		room = bk.hasRoom() && b.linkHasRoomLocked(ls)
	}
	b.mu.Unlock()
	if written {
		_ = l.move(ctx, run.Queued)
	} else {
		l.stillQueued(ctx)
	}
	return room
}

// stillQueued closes the lane of an offer handed back before its offering
// write when the record no longer has the run queued: the check that
// write would have made (writeOffering), made by a read. A failed read
// leaves the lane as it is; its next offer or claim meets the record.
func (l *lane) stillQueued(ctx context.Context) {
	r, err := l.b.st.GetRun(ctx, l.id)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && r.Status != run.Queued:
		l.log.InfoContext(ctx, "run is no longer queued; its lane closes", "status", string(r.Status))
		l.b.forget(l)
	case err != nil && ctx.Err() == nil:
		l.log.WarnContext(ctx, "could not read the run an offer was handed back for", "err", err)
	}
}

func (l *lane) onVerdict(ctx context.Context, c verdictCmd) {
	// However it is read, the link answered for the run: a place kept on
	// it since its offer moved to another link of its key is free once
	// this answer is (moved.go).
	defer l.b.heardOn(c.link.link, l.id)
	if l.offer == nil && c.v == wire.Accepted {
		// Not an answer to an offer: the provider saying it holds the
		// run — read as a report (D15): it re-adopts a run held across a
		// takeover (D7), and claims one nobody holds when it comes from
		// the key serving the agent (the late-ack rule, D15).
		if why := l.claimByReport(ctx, c.link, c.registered, c.offerable); why != "" {
			l.refuseLive(ctx, c, why)
		}
		return
	}
	if c.v == wire.Accepted && l.keyAnswers(c.link, c.registered) {
		l.answeredBy(ctx, c.link) // another process of the key took it (D15)
	}
	if l.offer == nil || c.link != l.offer.link {
		// An answer to an offer that is no longer out (it lapsed, or
		// went to another link).
		l.refuseCmd(c, l.strangerSafe(c.link, refusedNoOffer))
		return
	}
	key := c.link.key
	switch c.v {
	case wire.Accepted:
		l.offer.timer.Stop()
		from := l.offer.recorded()
		l.offer = nil
		l.b.metrics.offers.WithLabelValues("accepted").Inc()
		l.claim(ctx, c.link, from, true)
	case wire.Declined:
		l.b.metrics.offers.WithLabelValues("declined").Inc()
		// The key answered an offer of the run in time: a lapse before it
		// was given up on and then answered, so its claim afterwards is a
		// claim of a run it was not offered, not a late answer.
		l.gaveUpOn = ""
		// A link that took the agent out of service after the offer
		// left (deleteAgent, a register without it) declines what it no
		// longer serves: not a misdeclaration (design.md §Counters).
		l.b.mu.Lock()
		serving := l.b.served[l.agent] == c.link
		l.b.mu.Unlock()
		if l.handBack(ctx) && serving {
			// It declined while funduq believed it had room: counted,
			// not believed — its declaration stands.
			l.log.WarnContext(ctx, "provider declined with room", l.keyAttr(key)...)
			l.b.count(ctx, key, store.Misdeclared)
		}
	case wire.Refused:
		l.offer.timer.Stop()
		l.offer = nil
		l.b.metrics.offers.WithLabelValues("refused").Inc()
		l.log.InfoContext(ctx, "provider refused the run", append(l.keyAttr(key), "reason", c.reason)...)
		// The place stays held until the run is forgotten.
		l.refused(ctx, c.reason)
	}
}

func (l *lane) onLapse(ctx context.Context, c lapseCmd) {
	if l.offer == nil || l.offer.id != c.offer {
		return
	}
	if !l.offer.rechecked && time.Since(l.offer.sent) > l.b.set.DeliverTimeout+lapseSlack {
		// The broker itself ran late — frozen (SIGSTOP) or starved of CPU
		// past the deadline — so an answer the provider sent in time may
		// still be unread on its link: counting unanswered now would blame
		// the provider for funduq's stall (D6 counts what funduq observes).
		// Put off once, on real time, for the reader to catch up.
		l.offer.rechecked = true
		id := l.offer.id
		time.AfterFunc(lapseSlack, func() { l.q.push(lapseCmd{id}) })
		l.log.InfoContext(ctx, "offer lapsed while the broker ran late; waiting a moment for an answer already sent",
			"late_by", (time.Since(l.offer.sent) - l.b.set.DeliverTimeout).Round(time.Millisecond).String())
		return
	}
	if stalls, resumed := l.offer.link.stall.since(); stalls != l.offer.stalls || resumed != nil || l.offer.stalled {
		// funduq stopped reading the link while the offer was out (its
		// backlog was full: backpressure, design.md §Counters), so the
		// provider's answer may be unread: the silence is funduq's. Put
		// off until the link is read again, and then lapseSlack for the
		// reader to hand the answer over; a lapse after that with no new
		// wait counts.
		l.offer.stalls, l.offer.stalled = stalls, false
		id, gone := l.offer.id, l.offer.link.gone
		l.log.InfoContext(ctx, "offer lapsed while funduq was not reading its link; waiting for the link to be read")
		relapse := func() { time.AfterFunc(lapseSlack, func() { l.q.push(lapseCmd{id}) }) }
		if resumed == nil { // the wait is over already
			relapse()
			return
		}
		go func() {
			select {
			case <-resumed:
				relapse()
			case <-gone: // the link's close hands the offer back
			case <-ctx.Done():
			}
		}()
		return
	}
	l.b.mu.Lock()
	replaced := l.offer.link.replaced
	l.b.mu.Unlock()
	if replaced {
		// A newer link of its key replaced the link, which is offered
		// nothing more: the lapse came before the lane read that
		// (onReplaced), which hands the offer back uncounted too.
		l.handBack(ctx)
		return
	}
	key := l.offer.link.key
	l.b.metrics.offers.WithLabelValues("unanswered").Inc()
	l.gaveUpOn = key
	l.handBack(ctx)
	l.log.WarnContext(ctx, "offer unanswered; run back to queued", l.keyAttr(key)...)
	l.b.count(ctx, key, store.Unanswered)
}
