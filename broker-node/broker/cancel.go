package broker

import (
	"context"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

func (l *lane) onCancel(ctx context.Context) {
	b := l.b
	b.mu.Lock()
	l.cancelRequested = true
	claimed, orphan, status := l.claimedBy != nil, l.orphan, l.status
	b.mu.Unlock()
	switch {
	case orphan:
		// Sent again once its provider re-adopts it.
	case !claimed:
		l.conclude(ctx, roundWrite{end: &store.Conclusion{Move: store.Move{To: run.Cancelled}}})
	case status == run.Running:
		if l.move(ctx, run.Cancelling) == nil {
			l.sendCancel(ctx)
		}
	case status == run.Cancelling:
		l.sendCancel(ctx)
	}
}

func (l *lane) sendCancel(ctx context.Context) {
	b := l.b
	b.mu.Lock()
	ls := l.claimedBy
	b.mu.Unlock()
	if ls == nil {
		return
	}
	frame, _ := wire.Marshal(wire.Cancel{Type: wire.TypeCancel, RunID: l.id})
	if err := ls.link.Send(frame); err != nil {
		l.log.WarnContext(ctx, "cancel could not be sent", "err", err)
		return
	}
	l.log.InfoContext(ctx, "cancel passed on to the provider", "provider_key", ls.key)
}

func (l *lane) onGone(ctx context.Context, c goneCmd) {
	ls := c.link
	if l.offer != nil && l.offer.link == ls {
		l.handBack(ctx) // no answer will come; the run waits for a provider
		return
	}
	b := l.b
	b.mu.Lock()
	held := l.claimedBy == ls
	hold := held && c.lost && b.set.LinkGrace > 0 && !l.reportedEnd()
	if hold {
		// A dropped link is not yet an abandonment (D5): the run waits
		// for the key to re-attach and report, as at a takeover. It keeps
		// its place: the provider is presumed to be running it still.
		l.orphan, l.adoptKey, l.linkLost = true, ls.key, true
		if l.offeredTo != nil {
			l.reserved = l.offeredTo.key
		}
		b.holdLocked(l, nil, nil)
		l.orphanT = b.clock.AfterFunc(b.set.LinkGrace, func() { l.q.push(orphanCmd{}) })
	}
	b.mu.Unlock()
	switch {
	case hold:
		l.log.InfoContext(ctx, "link lost without a close frame; holding the run for the link grace", "provider_key", ls.key,
			"link", ls.id, "link_grace", b.set.LinkGrace.String())
	case held:
		l.fail(ctx, run.ReasonProviderLeftHoldingIt, true)
	}
}

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

func (l *lane) onOrphanTimeout(ctx context.Context) {
	b := l.b
	b.mu.Lock()
	orphan, lost, key := l.orphan, l.linkLost, l.adoptKey
	b.mu.Unlock()
	if !orphan {
		return
	}
	if lost {
		// The link grace passed and the key did not come back: now it is
		// certain it left holding the run (D18, design.md §Counters).
		l.b.mu.Lock()
		l.noted = true
		l.b.mu.Unlock()
		if l.fail(ctx, run.ReasonProviderLeftHoldingIt, false) && !l.reportedEnd() {
			b.count(ctx, key, store.Abandoned)
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
