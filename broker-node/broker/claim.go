package broker

import (
	"context"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// claim records that ls accepted the run (from offering, or queued for a
// late ack): it leaves its thread's queue and the next utterance is offered.
// With queued, what the link sent right behind its accept — events, and
// its finish — is written with the claim, in one transaction.
func (l *lane) claim(ctx context.Context, ls *linkState, from run.Status, queued bool) {
	l.events = nil // a new round: the per-run limits count from here
	l.eventAt = nil
	var batch []eventCmd
	finish := false
	if queued && len(l.deferred) == 0 {
		// Nothing is stored after the run's terminal event: what came
		// behind it is refused here as on any other path (lane.handle).
		batch = l.cutAfterEnd(l.q.takeEvents(ls, maxEventBatch))
		var fin finishCmd
		fin, finish = l.q.takeFinish(ls)
		defer fin.handled()
	}
	if len(batch) == 0 && !finish {
		// The record says running before the next utterance can be offered.
		if _, _, err := l.persist(ctx, roundWrite{claim: true}); err == nil {
			l.tookClaim(ctx, ls, from)
			if l.cancelRequested {
				l.onCancel(ctx)
			}
		} else {
			l.claimRefused(ctx, ls, err)
		}
		return
	}
	a := l.admit(batch, true)
	if a.stop != "" || l.readBack || finish && a.mayResend(l.lastPSeq) {
		// A refused event fails the run after what precedes it is stored;
		// an event repeated in the batch is a resend only the store tells
		// (relay): the claim goes alone, then the batch as any other.
		l.claimAlone(ctx, ls, from, batch, a, finish)
		return
	}
	if finish {
		// The whole round at once: claim, events, end.
		l.tookClaim(ctx, ls, from)
		l.endWith(ctx, true, a)
		ls.release(batch...)
		return
	}
	// The run's terminal event with no finish behind it yet is held back
	// to go with the end (the finish follows it on the link), so no door
	// sees the round's last event before its end is recorded.
	var held []eventCmd
	var heldA admitted
	whole, wholeA := batch, a
	if j := terminalAt(a.infos); j >= 0 {
		held, batch = batch[a.idx[j]:], batch[:a.idx[j]]
		a, heldA = a.split(j, l.lastPSeq)
	}
	_, pub, err := l.persist(ctx, roundWrite{claim: true, events: a})
	if err != nil && refusedData(err) && ctx.Err() == nil {
		// PostgreSQL refuses a value in the events, not the claim: the
		// claim goes alone, then the events as any batch, which fails
		// the run at the event it refuses (relay, design.md D18). Those
		// the write refused for their seq are answered already, and the
		// finish, when it comes, finds the run as that leaves it.
		wholeA.taken = nil
		l.claimAlone(ctx, ls, from, whole, wholeA, false)
		return
	}
	ls.release(batch...)
	if err != nil {
		ls.release(held...)
		if len(a.evs) > 0 && ctx.Err() == nil {
			l.log.ErrorContext(ctx, "claim refused", "err", err)
		}
		l.claimRefused(ctx, ls, err)
		return
	}
	l.tookClaim(ctx, ls, from)
	l.publishBatch(ctx, pub)
	if l.cancelRequested {
		l.onCancel(ctx)
	}
	switch {
	case len(held) == 0:
	case l.isEnded():
		ls.release(held...)
	default:
		fin, finish := l.q.takeFinish(ls)
		l.relay(ctx, ls, held, heldA, finish)
		fin.handled()
	}
}

// claimAlone writes the claim by itself, then relays the batch read with
// it (admitted as a) as any other, the finish behind it when finish.
func (l *lane) claimAlone(ctx context.Context, ls *linkState, from run.Status, batch []eventCmd, a admitted, finish bool) {
	if _, _, err := l.persist(ctx, roundWrite{claim: true}); err != nil {
		ls.release(batch...)
		l.claimRefused(ctx, ls, err)
		return
	}
	l.tookClaim(ctx, ls, from)
	if l.cancelRequested {
		l.onCancel(ctx)
	}
	l.relay(ctx, ls, batch, a, finish)
}

// terminalAt is the index of the first RUN_FINISHED or RUN_ERROR among
// infos, or -1.
func terminalAt(infos []agui.Info) int {
	for i, in := range infos {
		if in.RunFinished || in.RunError {
			return i
		}
	}
	return -1
}

// claimed is the lane's side of a claim the record holds (or is about to,
// in the same transaction as the run's end): the run leaves its thread's
// queue, the next utterance and interjections waiting for it are nudged.
func (l *lane) tookClaim(ctx context.Context, ls *linkState, from run.Status) {
	b := l.b
	b.mu.Lock()
	b.holdLocked(l, ls, l.offeredTo)
	l.claimedAt = b.clock.Now()
	// Claimed: a lapse before it is answered (its late ack counted when
	// it was one), so the run's end keeps no place for a late ack (unwind.go).
	l.gaveUpOn = ""
	b.leaveThreadLocked(l)
	for _, other := range b.addressing[l.id] { // interjections waiting for this run to be live
		b.nudgeLocked(other)
	}
	b.mu.Unlock()
	l.log.InfoContext(ctx, "run claimed", append(l.keyAttr(ls.key), "link", ls.id, "from", string(from))...)
}

// claimByReport makes ls the run's holder when a report from it may speak for
// the run — claiming, passing or re-adopting the run, with the writes and
// the counting that come with it — or says why the report is refused. A
// report is itself the answer: an event or finish from the link an
// offer is out to accepts it; from the key now serving the agent, for a run
// no one holds, it is a late ack — claimed even when the key's bucket is
// full (the provider chose to run it; the place is counted), answered_late
// only when an offer to that key had lapsed; from the key that held the run
// before a takeover or a lost link, it re-adopts it (D7). It returns ""
// when ls holds the run, or the reason the report is refused. registered
// is whether ls had registered agents when the report was read
// (keyAnswers). offerable is whether ls had registered at some time when
// the report was read: one read before cannot answer an offer to ls, nor
// be ls's late ack, whenever the lane gets to it — it is a resend of an
// earlier round (design.md D7); taken, a paused round resent before
// register would answer the round its caller's answer opened.
func (l *lane) claimByReport(ctx context.Context, ls *linkState, registered, offerable bool) string {
	b := l.b
	if l.keyAnswers(ls, registered) {
		l.answeredBy(ctx, ls)
	}
	if l.offer != nil && l.offer.link == ls && offerable {
		l.offer.timer.Stop()
		from := l.offer.recorded()
		l.offer = nil
		b.metrics.offers.WithLabelValues("accepted").Inc()
		l.claim(ctx, ls, from, false) // the report in hand comes first
		if l.isEnded() {
			return refusedEnded // the record refused the claim (claimRefused)
		}
		return ""
	}
	b.mu.Lock()
	switch {
	case l.claimedBy == ls:
		l.passed = false
		b.mu.Unlock()
		return ""
	case l.claimedBy != nil && l.claimedBy.key == ls.key && (l.claimedBy.replaced || b.links[l.claimedBy.link] != l.claimedBy) &&
		ls.moved[l.id] == nil:
		// The link holding it was replaced by this newer link of the key
		// (or is gone and its loss not yet read): the key carries on here.
		// Not when the run's offer to this link was answered by the holder
		// (moved.go): this answers that offer, and the holder, left open
		// as replaced links are, runs the run (replaced.go).
		old := l.claimedBy
		b.holdLocked(l, ls, ls) // same key: the place stays taken
		l.passed = false
		cancel := l.cancelRequested
		b.mu.Unlock()
		l.log.InfoContext(ctx, "run passed to the newer link of its key", append(l.keyAttr(ls.key), "from", old.id, "link", ls.id)...)
		if cancel {
			l.sendCancel(ctx) // the old link's copy may never have been read (hold.go onGone)
		}
		return ""
	case l.claimedBy != nil && l.passed && l.claimedBy.key == ls.key:
		// Passed to a link that replaced its holder and has not reported
		// for it: the key reports for it here, so it is run here (a
		// second process took the agent over while the first still runs
		// the run, D5). Same key: the place stays taken.
		old := l.claimedBy
		b.holdLocked(l, ls, ls)
		l.passed = false
		cancel := l.cancelRequested
		b.mu.Unlock()
		l.log.InfoContext(ctx, "run passed to the link of its key that reports for it", append(l.keyAttr(ls.key), "from", old.id, "link", ls.id)...)
		if cancel {
			l.sendCancel(ctx) // asked of the link that runs it now
		}
		return ""
	case l.claimedBy != nil:
		b.mu.Unlock()
		l.log.WarnContext(ctx, "report from a link that does not hold the run; refused", append(l.keyAttr(ls.key), "link", ls.id)...)
		return l.strangerSafe(ls, refusedOtherLink)
	case l.orphan && ls.key == l.adoptKey:
		l.orphan = false
		b.unlostHeldLocked(l)
		b.holdLocked(l, ls, ls)
		if l.claimedAt.IsZero() {
			// Re-adoption is no new acceptance: a run this leader saw
			// claimed keeps its undelivered window from that claim, so a
			// link that blips within the link grace does not start it
			// again (design.md §Timers). A run read back at a takeover
			// has no claim time here: its window starts now.
			l.claimedAt = b.clock.Now()
		}
		if l.reserved == "" {
			b.bucketFor(ls.key).inFlight++
		}
		l.reserved = "" // the kept place is the adopter's now
		b.leaveThreadLocked(l)
		b.mu.Unlock()
		if l.orphanT != nil {
			l.orphanT.Stop()
		}
		err := b.write(ctx, "adopt run", func() error { _, err := b.st.Adopt(ctx, l.epoch, l.id); return err })
		if err != nil {
			l.log.ErrorContext(ctx, "could not re-adopt run", "err", err)
			l.claimRefused(ctx, ls, err)
			return refusedEnded
		}
		l.log.InfoContext(ctx, "run re-adopted by its provider", append(l.keyAttr(ls.key), "link", ls.id)...)
		if l.cancelRequested {
			l.onCancel(ctx) // as for a claimed run: the record says cancelling, then the frame
		}
		return ""
	case !l.orphan && l.offeredTo == nil && registered && (b.served[l.agent] != nil && b.served[l.agent].key == ls.key ||
		l.reserved == ls.key && !ls.withdrawn):
		// The key serving the agent, or — while its offer's link is lost
		// and its place kept — a registered link of that key: the key's
		// report takes the kept place over (design.md D5), as it would
		// have answered the offer a moment before the loss (D15). A link
		// that had registered nothing when the report was read is
		// resending (D7) and is refused, whichever link of the key serves
		// the agent: taken, a paused round resent before register would
		// be the round an answer reopened, the answer swallowed.
		if l.reserved == ls.key {
			l.reserved = "" // the place kept since its offer's link was lost (keepPlace)
		} else {
			b.bucketFor(ls.key).inFlight++
		}
		b.holdLocked(l, l.claimedBy, ls)
		b.mu.Unlock()
		late := l.gaveUpOn == ls.key
		if late {
			l.log.WarnContext(ctx, "late ack: the provider reported for a run whose offer had lapsed", l.keyAttr(ls.key)...)
		} else {
			l.log.InfoContext(ctx, "the provider reported for a queued run it was not offered: claimed", l.keyAttr(ls.key)...)
		}
		l.claim(ctx, ls, run.Queued, false)
		if l.isEnded() {
			return refusedEnded // the record refused the claim (claimRefused)
		}
		if late {
			b.count(ctx, ls.key, store.AnsweredLate)
		}
		return ""
	}
	b.mu.Unlock()
	l.log.WarnContext(ctx, "report for a run nobody holds; refused", append(l.keyAttr(ls.key), "link", ls.id)...)
	return refusedUnknown
}

// claimRefused answers an accept whose claim (or a report whose
// re-adoption) the record refused because the run no longer waits for a
// provider, or is no longer held — it ended or paused meanwhile,
// by a writer other than this lane: the provider is asked to cancel (as
// for an offer whose offering write was refused) and the lane closes, the
// record being the truth. Any other failure is the leader's own: its
// writes are retried until it steps down, and the next leader reads the
// run back (design.md D7).
func (l *lane) claimRefused(ctx context.Context, ls *linkState, err error) {
	if ctx.Err() != nil || !noLongerQueued(run.Running, err) {
		return
	}
	l.retractOffer(ctx, ls, err)
	l.log.InfoContext(ctx, "the record refused the claim: the run no longer waits; its lane closes", "err", err)
	l.b.forget(l)
}
