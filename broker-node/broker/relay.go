package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// onEvents stores a batch of events from the run's holder, admitted once
// here, and ends the run when its finish came right behind them.
func (l *lane) onEvents(ctx context.Context, link *linkState, batch []eventCmd, finish bool) {
	l.relay(ctx, link, batch, l.admit(batch, false), finish)
}

// admitted is a batch of provider events read in order: what to store
// (validated, within the run's limits; the store skips resends), their
// infos, the highest provider seq seen so far, and, when one event stopped
// the batch, why (the events before it are still stored, then the run
// fails).
type admitted struct {
	evs      []store.NewEvent
	infos    []agui.Info
	idx      []int        // the batch index each of evs came from
	from     []*linkState // the link each of evs came from
	taken    []*linkState // the links of events refused for their seq (store.SeqTaken)
	pseq     int64
	stop     run.Reason
	stopErr  error
	stopFrom *linkState
	stopAt   int // the batch index of the event that stopped it
}

// admit reads batch in order; claim says it goes with the run's claim.
func (l *lane) admit(batch []eventCmd, claim bool) admitted {
	a := admitted{evs: make([]store.NewEvent, 0, len(batch)), infos: make([]agui.Info, 0, len(batch)), pseq: l.lastPSeq}
	counted := 0
	var bySeq map[int64]json.RawMessage
	for i, c := range batch {
		if claim && c.pseq != nil && c.bad == nil {
			// Another event under a seq this batch already carries: a
			// claim's write does not answer for each event, so it is
			// refused here (store.SeqTaken); the round has nothing
			// stored, so the batch's first event under the seq is the
			// one stored. A resend is the same JSON value, however
			// written (D7). Past the claim the store tells them, from
			// what the round stored — the batch's first event under a
			// seq may be refused there, and a later one be a resend of
			// the stored one — and answers each (lane.refuseTaken).
			if prev, ok := bySeq[*c.pseq]; ok && !store.SameEvent(prev, c.ev) {
				a.taken = append(a.taken, c.link)
				continue
			}
			if bySeq == nil {
				bySeq = map[int64]json.RawMessage{}
			}
			bySeq[*c.pseq] = c.ev
		}
		err := c.bad
		var info agui.Info
		if err == nil {
			info, err = agui.Validate(c.ev)
		}
		if err != nil {
			a.stop, a.stopErr, a.stopFrom, a.stopAt = run.ReasonMalformedEvent, err, c.link, i
			if c.tooBig {
				a.stop = run.ReasonEventTooLarge
			}
			break
		}
		// A provider seq is a resend guard matched exactly, by the store
		// (design.md D7): one at or below the highest seen may be a resend
		// or an event sent out of order, which the store alone can tell.
		// Only the ones above it count towards the run's event limit, so
		// a resent report does not fail a run near its limit.
		fresh := c.pseq == nil || *c.pseq > a.pseq
		if fresh {
			if reason, err := l.b.set.Limits.check(c.ev, len(l.events)+counted); reason != "" { // limits.go
				a.stop, a.stopErr, a.stopFrom, a.stopAt = reason, err, c.link, i
				break
			}
			counted++
		}
		if c.pseq != nil && *c.pseq > a.pseq {
			a.pseq = *c.pseq
		}
		a.evs = append(a.evs, store.NewEvent{Event: c.ev, ProviderSeq: c.pseq})
		a.infos = append(a.infos, info)
		a.idx = append(a.idx, i)
		a.from = append(a.from, c.link)
	}
	return a
}

// split cuts a at its j-th event: what comes before it and the rest, each
// as admit would have read it alone after the events before it were
// stored (each part's pseq is the highest seen up to its end).
func (a admitted) split(j int, base int64) (before, rest admitted) {
	before = admitted{evs: a.evs[:j], infos: a.infos[:j], idx: a.idx[:j], from: a.from[:j], taken: a.taken, pseq: base}
	for _, e := range before.evs {
		if e.ProviderSeq != nil && *e.ProviderSeq > before.pseq {
			before.pseq = *e.ProviderSeq
		}
	}
	rest = admitted{evs: a.evs[j:], infos: a.infos[j:], from: a.from[j:], pseq: a.pseq}
	for _, i := range a.idx[j:] {
		rest.idx = append(rest.idx, i-a.idx[j])
	}
	return before, rest
}

// mayResend reports whether an event of a may repeat one stored before it
// (a resend after a reconnect, D7): its provider seq is not above the
// highest seen before it, from base on. Only the store tells a resend, so
// such a batch is stored before the run's end is decided from what it
// took in (relay): folded in, a resend would repeat the agent's reply on
// its thread.
func (a admitted) mayResend(base int64) bool {
	for _, e := range a.evs {
		if e.ProviderSeq != nil {
			if *e.ProviderSeq <= base {
				return true
			}
			base = *e.ProviderSeq
		}
	}
	return false
}

// relay writes a batch of events from the run's holder, admitted as a, and
// publishes what was stored. Every event is stored before it is published
// (D9). With finish, the run ends right behind them: in the same write
// when that is safe — every event well-formed, none a possible resend
// (mayResend), and the lane has seen every event this round stored (not
// read back at takeover, where a resend is only known by the store). An event that is malformed or breaks the
// run's limits fails the run after the events before it are stored.
func (l *lane) relay(ctx context.Context, link *linkState, batch []eventCmd, a admitted, finish bool) {
	if finish && !l.readBack && !l.heldBack && a.stop == "" && !a.mayResend(l.lastPSeq) {
		l.endWith(ctx, false, a)
		link.release(batch...)
		return
	}
	stored := true
	var pub []livefeed.Published
	if len(a.evs) > 0 {
		var n int
		var err error
		pub, n, err = l.storeUntilRefused(ctx, a)
		switch {
		case err != nil && refusedData(err) && ctx.Err() == nil:
			// PostgreSQL refuses a value in the event after the n it
			// stored, which no retry changes: the run fails as for an
			// event that does not validate, and the events before it
			// stay stored (D18). Going on without it would end the run
			// completed without an event its provider sent.
			l.log.ErrorContext(ctx, "provider event could not be stored", "err", err)
			a.stop, a.stopErr, a.stopFrom, a.stopAt = run.ReasonMalformedEvent, errUnstorable, a.from[n], a.idx[n]
		case err != nil:
			stored = false
			if ctx.Err() == nil {
				// Refused, not lost in a failover: the provider hears it.
				l.log.ErrorContext(ctx, "could not store events", "events", len(a.evs)-n, "err", err)
				from := 0
				if n > 0 {
					from = a.idx[n]
				}
				for _, c := range batch[from:] {
					l.b.refuse(c.link.link, kindEvent, l.id, refusedNotStored)
				}
			}
		}
	}
	if stored && a.stop != "" {
		// The refusals are written before the batch's backlog places are
		// given back: a query behind the events is answered only then, so
		// its answer follows them (design.md §The provider wire).
		l.log.WarnContext(ctx, "provider event refused; failing the run", append(l.keyAttr(a.stopFrom.key), "reason", string(a.stop), "err", a.stopErr)...)
		l.b.metrics.badEvents.WithLabelValues(string(a.stop)).Inc()
		l.b.refuse(a.stopFrom.link, kindEvent, l.id, fmt.Sprintf("%s: %v", a.stop, a.stopErr))
		for _, after := range batch[a.stopAt+1:] {
			l.b.refuse(after.link.link, kindEvent, l.id, refusedEnded)
		}
	}
	// The backlog counts events not yet stored: it is given back as soon
	// as the batch is, so the link is read again while the batch is
	// published.
	link.release(batch...)
	if len(a.evs) > 0 {
		l.publishBatch(ctx, pub)
	}
	if stored && a.stop != "" {
		// The run fails with the event's reason; the provider did not stop
		// serving, so nothing that withdraws is counted (D18). Its holder
		// keeps its place until it has unwound the run (unwind.go).
		l.b.mu.Lock()
		if holder := l.claimedBy; holder != nil {
			l.b.keepUnwindingLocked(holder, l.id, l.b.set.DeliverTimeout)
		}
		l.b.mu.Unlock()
		l.fail(ctx, a.stop, false)
	}
	if !finish {
		return
	}
	// The finish read with the batch is answered like one read alone
	// (lane.handle): the run's end, or a refusal the provider sees.
	switch {
	case l.isEnded():
		l.b.refuse(link.link, kindFinish, l.id, refusedEnded) // a refused event ended it
	case !stored:
		// The store refused the events: the run does not end without
		// them. When leadership ended mid-write instead, the link closes
		// with it and the next leader takes the resent finish (refuseLive).
		l.refuseLive(ctx, finishCmd{link: link}, refusedNotStored)
	default:
		// link stored the events before it: it holds the run, and answers
		// no offer (none is out).
		if why := l.claimByReport(ctx, link, false, true); why != "" {
			l.b.refuse(link.link, kindFinish, l.id, why)
			return
		}
		l.endByFunnel(ctx)
	}
}

// errUnstorable is what a provider is told of an event PostgreSQL refused
// for a value in it: the driver's message stays in the log.
var errUnstorable = errors.New("funduq cannot store a value in it")

// storeUntilRefused stores the events of a in order, up to the first one
// PostgreSQL refuses for its data (refusedData), and returns what it stored
// for the live feed, how many of a's events it stored (n), and the error
// that stopped it: a's events from n on are not stored. One write takes
// the whole batch; only when PostgreSQL refuses it are its halves written
// in turn, down to the one event it refuses.
func (l *lane) storeUntilRefused(ctx context.Context, a admitted) (pub []livefeed.Published, n int, err error) {
	_, pub, err = l.persist(ctx, roundWrite{events: a})
	if err == nil {
		return pub, len(a.evs), nil
	}
	if len(a.evs) == 1 || !refusedData(err) || ctx.Err() != nil {
		return nil, 0, err
	}
	a.taken = nil // answered by the write just refused (persist)
	before, rest := a.split(len(a.evs)/2, l.lastPSeq)
	pub, n, err = l.storeUntilRefused(ctx, before)
	if err != nil {
		return pub, n, err
	}
	more, m, err := l.storeUntilRefused(ctx, rest)
	return append(pub, more...), n + m, err
}

// kept takes in the events of a that the store took now — seqs[i] > 0, or
// every one with nil seqs: the end funnel notes them, the round's highest
// provider seq moves on, and they count as relayed.
func (l *lane) kept(a admitted, seqs []int) {
	l.lastPSeq = a.pseq
	n := 0
	for i, e := range a.evs {
		if seqs != nil && seqs[i] <= 0 {
			continue // already stored (a resend), or refused (store.SeqTaken)
		}
		l.note(e.Event, a.infos[i])
		if e.ProviderSeq != nil {
			if l.eventAt == nil {
				l.eventAt = map[int64]int{}
			}
			l.eventAt[*e.ProviderSeq] = len(l.events) - 1
		}
		n++
	}
	l.b.metrics.events.Add(float64(n))
}

// observe notes a stored event of this round (read back at takeover).
func (l *lane) observe(ev json.RawMessage) {
	if info, err := agui.Validate(ev); err == nil {
		l.note(ev, info)
	}
}

// note keeps what the finish funnel needs from one stored event.
func (l *lane) note(ev json.RawMessage, info agui.Info) {
	l.events = append(l.events, ev)
	if info.RunFinished || info.RunError {
		l.b.mu.Lock()
		l.endStored = true
		l.b.mu.Unlock()
	}
	switch {
	case info.RunFinished:
		l.sawFinish = true
		l.interrupts = info.Interrupts
	case info.RunError:
		l.sawError = true
		l.errReason = info.ErrorCode
		if l.errReason == "" {
			l.errReason = info.ErrorMessage
		}
	}
}
