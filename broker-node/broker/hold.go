package broker

import (
	"context"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// onGone is the run's link going away. An offer out to it is handed back;
// a run it holds passes to the link serving its agent when the link was
// replaced (replaced.go: its process closed it, or funduq did); is held for
// the link grace when the link was lost without a close frame, or was
// replaced and nobody serves the agent now, and the run's end is not
// stored (D5); and fails provider_left_holding_it otherwise.
func (l *lane) onGone(ctx context.Context, c goneCmd) {
	ls := c.link
	if l.offer != nil && l.offer.link == ls {
		l.handBack(ctx) // no answer will come; the run waits for a provider
		if c.lost && !ls.withdrawn && l.b.set.LinkGrace > 0 && !l.isEnded() {
			l.keepPlace(ls.key)
		}
		return
	}
	b := l.b
	b.mu.Lock()
	held := l.claimedBy == ls
	if nl := b.served[l.agent]; held && ls.replaced && nl != nil && nl != ls && nl.key == ls.key && b.links[nl.link] == nl {
		// A newer link of the key took over every agent this one served
		// and this one closed: the provider did not stop serving
		// (design.md §Counters), so the run passes to the link now
		// serving its agent, as the key's next report would pass it
		// (claimByReport). Same key: the place stays taken.
		b.holdLocked(l, nl, nl)
		l.passed = true
		cancel := l.cancelRequested
		b.mu.Unlock()
		l.log.InfoContext(ctx, "replaced link closed; its run passes to the link that replaced it", append(l.keyAttr(ls.key),
			"from", ls.id, "link", nl.id)...)
		if cancel {
			// A cancel sent on the closed link may never have been read
			// (a process replaces a link that stalled): the link holding
			// the run now is asked anew, as one re-adopting it is
			// (design.md §The status machine).
			l.sendCancel(ctx)
		}
		return
	}
	// A replaced link's close is no goodbye of its key either: when the
	// link that replaced it is gone too (funduq then closes the replaced
	// one, replaced.go), nobody took the run over and its provider may
	// still be running it, so it waits for the key as a lost link's run
	// does (D5), not failed and counted abandoned.
	hold := held && (c.lost || ls.replaced) && b.set.LinkGrace > 0 && !l.reportedEnd()
	var back *linkState // a link of the key already serving the agent again
	now := b.clock.Now()
	if hold {
		// A dropped link is not yet an abandonment (D5): the run waits
		// for the key to re-attach (onReattach) or report. It keeps its
		// place: the provider is presumed to be running it still.
		l.orphan, l.adoptKey, l.linkLost = true, ls.key, true
		if l.offeredTo != nil {
			l.reserved = l.offeredTo.key
		}
		b.holdLocked(l, nil, nil)
		l.graceEnd = now.Add(b.set.LinkGrace)
		if nl := b.served[l.agent]; nl != nil && nl != ls && nl.key == ls.key && b.links[nl.link] == nl {
			back = nl // its register was read before this loss was
		} else {
			b.lostHeldLocked(ls.key, l) // for the key's register to find
		}
	}
	b.mu.Unlock()
	switch {
	case hold:
		l.log.InfoContext(ctx, "link lost without a close frame; holding the run for the link grace", append(l.keyAttr(ls.key),
			"link", ls.id, "link_grace", b.set.LinkGrace.String())...)
		l.orphanAfter(b.set.LinkGrace)
		if back != nil {
			l.onReattach(ctx, reattachCmd{back, now})
		}
	case held:
		l.fail(ctx, run.ReasonProviderLeftHoldingIt, true)
	}
}

// orphanAfter (re)starts the held run's timer: d from now, orphanCmd ends
// the hold unless the run is re-adopted first.
func (l *lane) orphanAfter(d time.Duration) {
	if l.orphanT != nil {
		l.orphanT.Stop()
	}
	l.orphanGen++
	gen := l.orphanGen
	l.orphanT = l.b.clock.AfterFunc(d, func() { l.q.push(orphanCmd{gen}) })
}

// onReattach is the run's key registering the run's agent again while
// the run is held for its lost link (D5). Re-attaching within the link
// grace carries the run on: a transport failure and a prompt re-attach are
// not the certainty abandoned needs. But a provider that restarted has
// forgotten the run, and nothing else would end it (no clock fails a
// quiet run, §Timers), so it is carried on for one more link grace, from
// the re-attach, for the key's report that re-adopts it (claimByReport);
// with none it fails provider_left_holding_it and counts abandoned as
// before. A re-attach after the grace finds the run failed already.
func (l *lane) onReattach(ctx context.Context, c reattachCmd) {
	b := l.b
	b.mu.Lock()
	b.unlostHeldLocked(l)
	still := !l.ended && l.orphan && l.linkLost && c.at.Before(l.graceEnd)
	b.mu.Unlock()
	if !still {
		return
	}
	wait := c.at.Add(b.set.LinkGrace).Sub(b.clock.Now())
	l.orphanAfter(wait)
	l.log.InfoContext(ctx, "its key re-attached within the link grace; the run waits the link grace again for its report",
		"provider_key", c.link.key, "link", c.link.id, "link_grace", b.set.LinkGrace.String())
}

// keepPlace keeps a place on key's bucket for a run whose offer was out on
// a link lost without a close frame, for the link grace. The provider may
// have accepted it with an ack the link lost, and then runs it still: a
// re-attached link offered that place for another run would decline it,
// and a decline with room counts misdeclared (design.md D5, §Counters).
// The run's next offer to the key, or the key's report for it, takes the
// place over (try, claimByReport); the grace's end gives it back.
//
// At a takeover an older epoch's offer is the same (D7): the provider may
// have accepted it as the old leader went away, so the run keeps a place
// for provider_grace (take).
func (l *lane) keepPlace(key string) {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.keepPlaceLocked(key, l.b.set.LinkGrace)
}

// keepPlaceLocked is keepPlace for d; the caller holds b.mu.
func (l *lane) keepPlaceLocked(key string, d time.Duration) {
	b := l.b
	if l.ended || l.reserved != "" || l.offeredTo != nil || l.claimedBy != nil || d <= 0 {
		return
	}
	b.bucketFor(key).inFlight++
	l.reserved = key
	if l.reserveT != nil {
		l.reserveT.Stop()
	}
	l.reserveT = b.clock.AfterFunc(d, func() { l.q.push(unreserveCmd{}) })
}

// onUnreserve gives back the place keepPlace kept once the link grace has
// passed with neither an offer nor a report taking it over.
func (l *lane) onUnreserve() {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	key := l.reserved
	if l.ended || key == "" || l.orphan || l.offeredTo != nil || l.claimedBy != nil {
		return
	}
	b.bucketFor(key).release()
	l.reserved = ""
	b.nudgeHeadsOfKeyLocked(key)
	b.wakeSweep()
}

// onOrphanTimeout ends a held run nobody re-adopted: after a lost link's
// grace it fails provider_left_holding_it (abandoned counted), after
// provider_grace at a takeover orphaned_by_funduq_restart.
func (l *lane) onOrphanTimeout(ctx context.Context) {
	b := l.b
	b.mu.Lock()
	orphan, lost, key := l.orphan, l.linkLost, l.adoptKey
	b.mu.Unlock()
	if !orphan {
		return
	}
	if lost {
		// The link grace passed and the key did not come back, or came
		// back (onReattach) and did not report for the run within the
		// grace from then: now it is certain it left holding the run
		// (D18, design.md §Counters).
		// A run counts at most one of abandoned and undelivered
		// (§Counters): one counted undelivered before its link was lost
		// is not counted again.
		l.b.mu.Lock()
		first := !l.noted
		l.noted = true
		l.b.mu.Unlock()
		if l.fail(ctx, run.ReasonProviderLeftHoldingIt, false) && first && !l.reportedEnd() {
			b.countForRun(ctx, key, store.Abandoned, l.id)
		}
		return
	}
	l.fail(ctx, run.ReasonOrphanedByRestart, false)
	// Interjections read back at takeover that address it lost their
	// target: it did not survive the takeover (D7).
	b.mu.Lock()
	for _, other := range b.addressing[l.id] {
		if other.readBack && !other.ended {
			other.q.push(failCmd{run.ReasonInterjectionTargetLost})
		}
	}
	b.mu.Unlock()
}
