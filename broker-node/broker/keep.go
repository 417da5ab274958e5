package broker

import (
	"context"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// Reports kept for their link's register (design.md D7, "A resend read
// before register"). A provider's link is cut after it accepted a run, and
// funduq has not yet seen it go; the provider's next link of the same key
// resends the run's round before its register (our SDK writes a paused
// round it holds there). Refused "held by another link" as they were read,
// those reports were lost: the register then replaced the old link and the
// run passed to the new one, with a hole in its round, or — a paused round —
// nothing stored and the run running for good. So a report read on a link
// that had never registered, for a run another live link of its key holds
// and that was not replaced, is kept in the run's lane, in the order read.
// Once that changes — the link registers, the holder is replaced or goes,
// the link goes, the run ends — the kept reports are read again, in order,
// ahead of anything the lane has not read yet: the run passing to the link
// takes them as its own, and otherwise they get the typed refusal the
// lane gives them then (D15). They are still reports read before the link
// registered: never an answer to an offer nor a late ack. That a report
// was read before register is judged as it was read (its offerable), not
// as the lane gets to it, and an ack is such a report too (D15): kept
// with those behind it, it is answered as they are.
//
// Kept reports keep their places in the link's backlog, and a query read
// after them is answered once they are taken or refused, as for any
// report. A link keeps at most half its backlog (events and bytes), so its
// read loop always has room to read its register; past that, and for a
// second link's reports while one link's are kept, a report is refused as
// before. A run reopened by an answer is delivered again under the same
// seqs: kept reports that repeat what an earlier round of the run stored
// are a stale resend of that round, and taken they would answer the
// caller's answer, so they are refused (refusedEarlierRound).
type keptReports struct {
	link *linkState
	cmds []command
}

// keep keeps c, a report from link (offerable as it was read, reviewed
// when it was kept once already), and reports whether it did: behind the
// reports kept from its link already, or as the first when it was read
// before link registered and the run is held by another link of the key
// (keepsLocked), which claimByReport would refuse "held by another link"
// or take as the run passing to link. A report read before register past
// the bound on kept reports is refused "held by another link", as are
// that link's others read before register for the run.
func (l *lane) keep(c command, link *linkState, offerable, reviewed bool) bool {
	// Without the broker's lock first: most reports come from a
	// registered link, with nothing kept.
	if reviewed || l.keptOver == link && offerable {
		return false
	}
	if l.keptOver == link {
		// Its reports went past the bound: taking this one would take
		// the run after a hole, however late the lane gets to it.
		l.refuseCmd(c, refusedOtherLink)
		return true
	}
	if l.parked == nil && offerable || l.parked != nil && l.parked.link != link {
		return false
	}
	b := l.b
	b.mu.Lock()
	if l.parked == nil && !l.keepsLocked(link) {
		b.mu.Unlock()
		return false
	}
	size := 0
	if e, ok := c.(eventCmd); ok {
		size = len(e.ev)
	}
	if link.keptN+1 > max(1, b.set.EventBacklog/2) || link.keptBytes+size > b.set.EventBacklogBytes/2 {
		// Beyond the bound: refused as before, with every report kept
		// from this link for the run, so none is taken after a hole.
		l.keptOver = link
		cmds := l.unkeepLocked()
		b.mu.Unlock()
		for _, k := range append(cmds, c) {
			l.refuseCmd(k, refusedOtherLink)
		}
		return true
	}
	first := l.parked == nil
	if first {
		l.parked = &keptReports{link: link}
		m := b.keptOn[link]
		if m == nil {
			m = map[*lane]struct{}{}
			b.keptOn[link] = m
			if b.keptBell != nil {
				close(b.keptBell) // KeptForRegister
				b.keptBell = nil
			}
		}
		m[l] = struct{}{}
	}
	l.parked.cmds = append(l.parked.cmds, c)
	link.keptN++
	link.keptBytes += size
	var holder uint64
	if first {
		holder = l.claimedBy.id // keepsLocked: held by a link
	}
	b.mu.Unlock()
	if first {
		l.log.Info("report from a link that has not registered, for a run another link of its key holds: kept for its register",
			append(l.keyAttr(link.key), "link", link.id, "holder", holder)...)
	}
	return true
}

// keepsLocked reports whether a report read before link registered is
// kept: the run has not ended and is held by another link of link's key,
// or was passed to link and link has not reported for it. That is judged
// as the lane reaches the report, but the report's registration as it was
// read: a lane busy in a write reaches a report read before register
// only after the register, when its holder was replaced already — taken
// then, with nothing kept, a stale round resent before register was the
// new link's, and answered the caller's answer (design.md D7). Kept, it is
// checked as any kept report is (reviewKept), at once if nothing keeps it
// waiting (keptWaitsLocked). Caller holds b.mu.
func (l *lane) keepsLocked(link *linkState) bool {
	h := l.claimedBy
	return !l.ended && h != nil && h.key == link.key && (h != link || l.passed)
}

// keptWaitsLocked reports whether reports kept from link still wait:
// link is open and has never registered, and the run is held by another
// open link of its key that was not replaced, nor passed to it. Caller
// holds b.mu.
func (l *lane) keptWaitsLocked(link *linkState) bool {
	b := l.b
	h := l.claimedBy
	return !l.ended && b.links[link.link] == link && !link.registeredOnce &&
		h != nil && h != link && h.key == link.key && !h.replaced && !l.passed && b.links[h.link] == h
}

// unkeepLocked takes the kept reports out of the lane and their link's
// count, and returns them. Caller holds b.mu.
func (l *lane) unkeepLocked() []command {
	k := l.parked
	if k == nil {
		return nil
	}
	l.parked = nil
	b := l.b
	if m := b.keptOn[k.link]; m != nil {
		delete(m, l)
		if len(m) == 0 {
			delete(b.keptOn, k.link)
		}
	}
	for _, c := range k.cmds {
		k.link.keptN--
		if e, ok := c.(eventCmd); ok {
			k.link.keptBytes -= len(e.ev)
		}
	}
	return k.cmds
}

// reviewKept reads the kept reports again once they need no longer wait
// (keptWaitsLocked): ahead of what the lane has not read, marked reviewed
// so they are not kept again. Those that would be taken from a run that
// has an earlier round are checked against it first (staleKept).
func (l *lane) reviewKept(ctx context.Context) {
	if l.parked == nil || l.isEnded() {
		return
	}
	b := l.b
	b.mu.Lock()
	if l.keptWaitsLocked(l.parked.link) {
		b.mu.Unlock()
		return
	}
	link := l.parked.link
	if l.keptNext(link) {
		// More read before register from the link is next: they are
		// read again with these, as one resend (staleKept).
		b.mu.Unlock()
		return
	}
	open := b.links[link.link] == link
	cmds := l.unkeepLocked()
	b.mu.Unlock()
	if !open {
		for _, c := range cmds {
			l.refuseLive(ctx, c, refusedOtherLink) // nobody to tell: their places go back
		}
		return
	}
	if why := l.staleKept(ctx, cmds); why != "" {
		l.log.WarnContext(ctx, "reports read before their link registered are refused", append(l.keyAttr(link.key), "link", link.id,
			"reports", len(cmds), "why", why)...)
		for _, c := range cmds {
			l.refuseLive(ctx, c, why)
		}
		return
	}
	for i := range cmds {
		switch c := cmds[i].(type) {
		case eventCmd:
			c.reviewed = true
			cmds[i] = c
		case finishCmd:
			c.reviewed = true
			cmds[i] = c
		case verdictCmd:
			c.reviewed = true
			cmds[i] = c
		}
	}
	l.log.InfoContext(ctx, "reports read before their link registered are read again", append(l.keyAttr(link.key), "link", link.id,
		"reports", len(cmds))...)
	l.q.pushFront(cmds)
}

// staleKept is why the kept reports cmds are refused as a stale resend of
// an earlier round of the run, or "". A run an answer reopened is
// delivered again and its provider numbers the new round from 1 again:
// reports that repeat only what an earlier round stored — every event
// with a provider seq is stored there under that seq, the same JSON value,
// or none has a seq to tell it by, or there is only a finish — would
// answer the caller's answer with the old round (the run pausing again on
// the old question). A run in its first round has no earlier round to
// repeat. A failed read refuses them as before ("held by another link").
func (l *lane) staleKept(ctx context.Context, cmds []command) string {
	var evs []store.NewEvent
	for _, c := range cmds {
		if e, ok := c.(eventCmd); ok && e.bad == nil {
			evs = append(evs, store.NewEvent{Event: e.ev, ProviderSeq: e.pseq})
		}
	}
	earlier, repeats, err := l.b.st.EarlierRoundRepeats(ctx, l.id, evs)
	if err != nil {
		if ctx.Err() == nil {
			l.log.WarnContext(ctx, "could not read the run's earlier rounds; kept reports refused", "err", err)
		}
		return refusedOtherLink
	}
	if !earlier {
		return ""
	}
	for i, e := range evs {
		if e.ProviderSeq != nil && !repeats[i] {
			return "" // this round's own: an earlier round stored no such event
		}
	}
	return refusedEarlierRound
}

// wakeKeptLocked tells the lanes keeping reports from ls that it
// registered or went: their reports may be read again (reviewKept).
// Caller holds b.mu.
func (b *Broker) wakeKeptLocked(ls *linkState) {
	for l := range b.keptOn[ls] {
		l.q.push(keptCmd{})
	}
}

// keptNext reports whether the next command the lane reads is a report
// from link read before it registered, not yet kept: what a lane reaches
// after the link's register is kept and read again all together, as it
// would have been at the register.
func (l *lane) keptNext(link *linkState) bool {
	var next command
	if len(l.deferred) > 0 {
		next = l.deferred[0]
	} else {
		next = l.q.peek()
	}
	switch c := next.(type) {
	case eventCmd:
		return c.link == link && !c.offerable && !c.reviewed
	case finishCmd:
		return c.link == link && !c.offerable && !c.reviewed
	case verdictCmd:
		return c.link == link && !c.offerable && !c.reviewed && c.v == wire.Accepted
	}
	return false
}
