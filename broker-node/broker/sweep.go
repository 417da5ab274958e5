package broker

import (
	"context"

	"github.com/funduq/funduq-go/core/run"

	"github.com/funduq/funduq-go/core/store"
)

// sweep is two clocks and a nudge (design.md §Timers). It notes claimed runs their
// provider has not delivered within the window (counted, never ended),
// tells queued runs whose agent has gone unserved too long that nobody took
// them (their lanes decide), and now and then asks every waiting head to try
// again. It
// dispatches nothing and ends nothing itself.
func (b *Broker) sweep(ctx context.Context) {
	for {
		// Armed before the pass reads the clock: a clock that moves
		// while the pass runs, or before the goroutine comes back to arm
		// (a loaded machine; a test's fake clock), fires it, and the next
		// pass looks at where the clock went. Armed after, it counted the
		// interval from wherever the clock had got to, and a deadline the
		// move passed (a lost link's grace) waited for the clock to move
		// once more.
		t := b.clock.NewTimer(b.set.SweepInterval)
		b.sweepOnce(ctx)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-b.wake:
			t.Stop()
		case <-t.Chan():
		}
	}
}

func (b *Broker) sweepOnce(ctx context.Context) {
	now := b.clock.Now()
	// The nudge is the reference's cadence (every unserved window): a
	// declined run is asked again when something changes — a register, a
	// freed place, a new run — and otherwise only this rarely, so a
	// declining provider is never spun on.
	nudge := !now.Before(b.lastNudge.Add(b.set.UnservedTimeout))
	type held struct{ key, run string }
	var undelivered []held
	b.mu.Lock()
	// provider_grace ended: a run still waiting for a provider expected
	// back that did not come fails agent_offline now, not at the unserved
	// window (no_provider_took_it).
	graceEnds := !b.graceOver && b.set.ProviderGrace > 0 && !now.Before(b.takeoverAt.Add(b.set.ProviderGrace))
	if graceEnds {
		b.graceOver = true
		// Read-back runs decided at take; new runs ask only in grace.
		clear(b.expected)
		clear(b.inherited)
	}
	for _, l := range b.lanes {
		if graceEnds && l.graceWait && !l.ended && l.claimedBy == nil && l.offeredTo == nil && !l.orphan && b.served[l.agent] == nil &&
			(l.addressed == "" || b.lanes[l.addressed] == nil) { // an interjection follows its live target's fate

			l.graceWait = false
			// A key whose link was lost without a close frame is still
			// expected back within its link grace (D5): the run waits that
			// out, as a run arriving now would (take), and fails
			// agent_offline only if the key is not back by then (chaos
			// seed 1133).
			if until, lost := b.lostUntil[l.agent]; lost && now.Before(until) {
				l.linkWait, l.linkUntil = true, until
			} else {
				l.q.push(failCmd{run.ReasonAgentOffline})
				continue
			}
		}
		if l.ended {
			continue
		}
		if l.linkWait {
			// Waiting for a lost link's key within the link grace (D5).
			until, ok := b.lostUntil[l.agent]
			switch {
			case b.served[l.agent] != nil || !ok || !until.Equal(l.linkUntil):
				// Served again since (or lost again): the ordinary
				// unserved clock applies from here.
				l.linkWait = false
			case !now.Before(until) && l.claimedBy == nil && l.offeredTo == nil && !l.orphan &&
				(l.addressed == "" || b.lanes[l.addressed] == nil):
				l.linkWait = false
				l.q.push(failCmd{run.ReasonAgentOffline})
				continue
			}
		}
		if l.claimedBy != nil && !l.noted && !now.Before(l.claimedAt.Add(b.set.UndeliveredWindow)) {
			l.noted = true
			if l.endStored {
				// It delivered its end; only the finish frame is missing.
				// Ended from what is stored, never counted (D15).
				l.q.push(storedEndCmd{})
				continue
			}
			undelivered = append(undelivered, held{l.claimedBy.key, l.id})
			l.log.WarnContext(ctx, "claimed run not delivered within the window", l.keyAttr(l.claimedBy.key)...)
			continue
		}
		if l.claimedBy == nil && l.offeredTo == nil && !l.orphan && !l.expirySent && b.served[l.agent] == nil {
			ref := l.queuedAt
			if since, ok := b.unserved[l.agent]; ok && since.After(ref) {
				ref = since
			}
			if !now.Before(ref.Add(b.set.UnservedTimeout)) {
				l.expirySent = true
				l.q.push(expireCmd{})
			}
		}
	}
	// An agent unserved for longer than the unserved window no longer
	// moves any run's clock: a run queued before it went unserved expires
	// by its own queuedAt at the same moment or earlier, and one queued
	// after starts from its queuedAt anyway. Forgetting it keeps the map
	// to the agents that went away lately, not every agent ever seen.
	for ref, since := range b.unserved {
		if !now.Before(since.Add(b.set.UnservedTimeout)) {
			delete(b.unserved, ref)
		}
	}
	// A key with no link and no place taken has nothing in its bucket a
	// later link would not set again (Attach writes its declaration).
	keyed := map[string]bool{}
	for _, ls := range b.links {
		keyed[ls.key] = true
	}
	for key, bk := range b.buckets {
		if bk.inFlight == 0 && !keyed[key] {
			delete(b.buckets, key)
		}
	}
	for ref, until := range b.lostUntil {
		if !now.Before(until) {
			delete(b.lostUntil, ref)
		}
	}
	if nudge {
		b.lastNudge = now
		b.nudgeHeadsLocked()
	}
	b.mu.Unlock()
	for _, u := range undelivered {
		b.countForRun(ctx, u.key, store.Undelivered, u.run)
	}
	b.sweptAt.Store(now.UnixNano())
}

// verdictStands reports whether a failCmd's verdict on a waiting run still
// holds as the lane reads it: the run is still waiting (no offer out,
// nobody holds it, not held for a provider coming back) and what the
// verdict saw is still so — its agent unserved (agent_offline), its
// target not live (interjection_target_lost). A verdict pushed a moment
// before the lane offered the run, or before its provider registered, is
// stale: the lane goes on, and the unserved clock still applies.
func (l *lane) verdictStands(reason run.Reason) bool {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if l.ended || l.offer != nil || l.claimedBy != nil || l.offeredTo != nil || l.orphan {
		return false
	}
	if reason == run.ReasonInterjectionTargetLost {
		return b.lanes[l.addressed] == nil
	}
	return b.served[l.agent] == nil
}

// onExpire is the unserved clock's verdict on the lane (the sweep's
// expireCmd): a run still waiting for a provider fails no_provider_took_it.
func (l *lane) onExpire(ctx context.Context) {
	b := l.b
	b.mu.Lock()
	still := l.claimedBy == nil && l.offeredTo == nil && !l.orphan && b.served[l.agent] == nil
	if !still {
		l.expirySent = false
	}
	b.mu.Unlock()
	if still {
		l.fail(ctx, run.ReasonNoProviderTookIt, false)
	}
}
