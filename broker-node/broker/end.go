package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// endByFunnel ends the run by the finish funnel, first match wins: an
// interrupt outcome, or RUN_FINISHED with a tool call left unanswered,
// pauses (input-required); RUN_FINISHED completes; a
// requested cancel cancels; anything else fails.
func (l *lane) endByFunnel(ctx context.Context) { l.conclude(ctx, roundWrite{end: l.funnel(ctx)}) }

// endWith ends the run by the finish funnel with the provider's last
// events a stored first, in the same write; with claim, the claim that
// starts the round is written first in it too. The events are taken in
// before the funnel reads them.
func (l *lane) endWith(ctx context.Context, claim bool, a admitted) {
	before := l.seen()
	l.kept(a, nil)
	end := l.funnel(ctx)
	l.conclude(ctx, roundWrite{claim: claim, events: a, end: end, redecide: func(seqs []int) {
		// The store refused one of a's events (another event under a seq
		// the round took, D7): the end is decided again from the events
		// it did store, so a refused RUN_FINISHED or RUN_ERROR does not
		// end the run as the provider's own end (D15).
		l.unsee(before)
		for i, e := range a.evs {
			if seqs[i] > 0 {
				l.note(e.Event, a.infos[i])
			}
		}
		*end = *l.funnel(ctx)
	}})
}

// seenEvents is what note took in of a round, for unsee.
type seenEvents struct {
	n                   int
	sawFinish, sawError bool
	errReason           string
	interrupts          json.RawMessage
	endStored           bool
}

func (l *lane) seen() seenEvents {
	l.b.mu.Lock()
	endStored := l.endStored
	l.b.mu.Unlock()
	return seenEvents{len(l.events), l.sawFinish, l.sawError, l.errReason, l.interrupts, endStored}
}

// unsee forgets what note took in since s.
func (l *lane) unsee(s seenEvents) {
	clear(l.events[s.n:])
	l.events = l.events[:s.n]
	for pseq, i := range l.eventAt {
		if i >= s.n {
			delete(l.eventAt, pseq)
		}
	}
	l.sawFinish, l.sawError, l.errReason, l.interrupts = s.sawFinish, s.sawError, s.errReason, s.interrupts
	l.b.mu.Lock()
	l.endStored = s.endStored
	l.b.mu.Unlock()
}

// funnel is the end the run's stored events and its cancel say.
func (l *lane) funnel(ctx context.Context) *store.Conclusion {
	c := &store.Conclusion{}
	switch {
	case l.interrupts != nil || l.sawFinish && agui.OpenAsks(l.events) != nil:
		// A round that finished asking pauses: an interrupt outcome, or a
		// tool call it announced and nobody answered (seed 001, "Finish
		// asking"; design.md D1). The latter has no interrupts to store.
		interrupts := l.interrupts
		if interrupts == nil {
			interrupts = json.RawMessage(`[]`)
		}
		interrupt, _ := json.Marshal(map[string]json.RawMessage{"interrupts": interrupts})
		c.Move = store.Move{To: run.InputRequired, Interrupt: interrupt}
		c.AgentMessages = l.folded(ctx)
	case l.sawFinish:
		c.Move = store.Move{To: run.Completed}
		c.AgentMessages = l.folded(ctx)
	case l.cancelRequested:
		c.Move = store.Move{To: run.Cancelled}
	case l.sawError:
		reason := l.errReason
		if reason == "" {
			reason = "the provider reported RUN_ERROR"
		}
		// The provider's words, whatever they say (design.md §The
		// operator console, whose failure reason).
		c.Move = store.Move{To: run.Failed, Reason: run.Reason(reason), ReasonByProvider: true}
	default:
		c.Move = store.Move{To: run.Failed, Reason: run.ReasonStreamEndedWithoutFinishing}
		c.Events = []json.RawMessage{agui.RunError(run.StreamEndedMessage, string(run.ReasonStreamEndedWithoutFinishing))}
	}
	// A cancel the door recorded before this end, whose notice the lane
	// has not read yet, still comes before a failure: the write reads the
	// request under the row's lock (store.Conclusion.CancelOutranks).
	c.CancelOutranks = c.Move.To == run.Failed
	return c
}

func (l *lane) folded(ctx context.Context) []store.Message {
	msgs, err := agui.Fold(l.events)
	if err != nil {
		l.log.WarnContext(ctx, "could not fold the run's events into messages", "err", err)
		return nil
	}
	out := make([]store.Message, len(msgs))
	for i, m := range msgs {
		out[i] = store.Message{MessageID: run.NewMessageID(), Message: m}
	}
	return out
}

// fail ends the run failed with reason; a run that never sent its own
// RUN_ERROR gets one. countAbandoned counts abandoned against the holder of
// a claimed run (once per run).
//
// A run whose terminal event is stored has said how it ends: it ends by
// the finish funnel instead, nothing is stored after that event, and nothing
// is counted (D15) — on every path that would fail it (link loss, grace,
// takeover, the sweep).
func (l *lane) fail(ctx context.Context, reason run.Reason, countAbandoned bool) bool {
	return l.failWith(ctx, reason, countAbandoned, false)
}

// refused fails the run with a provider's permanent refusal: its reason
// recorded verbatim as the provider's, and the RUN_ERROR funduq writes for
// it carries that reason as code and message — funduq adds no sentence
// of its own, even when the provider chose one of funduq's reason names
// (seeds: the annotation is the provider's).
func (l *lane) refused(ctx context.Context, reason string) bool {
	return l.failWith(ctx, run.Reason(reason), false, true)
}

func (l *lane) failWith(ctx context.Context, reason run.Reason, countAbandoned, byProvider bool) bool {
	if l.offer != nil {
		l.offer.timer.Stop()
		l.offer = nil
	}
	if l.reportedEnd() {
		l.log.InfoContext(ctx, "run reported its end before it would fail; ended from what is stored", "reason", string(reason))
		l.endByFunnel(ctx)
		return true
	}
	c := &store.Conclusion{Move: store.Move{To: run.Failed, Reason: reason, ReasonByProvider: byProvider}}
	if !l.sawError {
		msg := run.Sentence(reason)
		if byProvider {
			msg = string(reason)
		}
		c.Events = []json.RawMessage{agui.RunError(msg, string(reason))}
	}
	b := l.b
	b.mu.Lock()
	var abandonedBy string
	if countAbandoned && l.claimedBy != nil && !l.noted {
		l.noted = true
		abandonedBy = l.claimedBy.key
	}
	b.mu.Unlock()
	l.log.WarnContext(ctx, "run failed", "reason", string(reason))
	ok := l.conclude(ctx, roundWrite{end: c})
	if ok && abandonedBy != "" {
		b.countForRun(ctx, abandonedBy, store.Abandoned, l.id)
	}
	return ok
}

// conclude writes the run's end (w.end) and forgets it. A refused write
// (the run was not where the lane thought) still forgets it: the record is
// the truth.
func (l *lane) conclude(ctx context.Context, w roundWrite) bool {
	b := l.b
	r, pub, err := l.persist(ctx, w)
	if ctx.Err() != nil {
		return false // leadership ended mid-write: the next leader ends it
	}
	if err != nil && refusedData(err) && w.end != nil {
		// The end can never land as it is (PostgreSQL refuses a value
		// in it); forgetting the run would leave its record running with
		// nobody holding it. It fails malformed_event instead, without
		// the provider's events that rode with the end, each refused to
		// its link; nothing is counted (design.md D18).
		l.log.ErrorContext(ctx, "run's end could not be stored; failing the run", "to", string(w.end.Move.To), "err", err)
		for _, from := range w.events.from {
			b.refuse(from.link, kindEvent, l.id, fmt.Sprintf("%s: funduq could not store the run's end", run.ReasonMalformedEvent))
		}
		w = roundWrite{claim: w.claim, end: &store.Conclusion{
			Move:   store.Move{To: run.Failed, Reason: run.ReasonMalformedEvent},
			Events: []json.RawMessage{agui.RunError(run.Sentence(run.ReasonMalformedEvent), string(run.ReasonMalformedEvent))},
		}}
		if r, pub, err = l.persist(ctx, w); ctx.Err() != nil {
			return false
		}
	}
	if err != nil {
		l.log.ErrorContext(ctx, "run's end was refused", "to", string(w.end.Move.To), "err", err)
		l.publishBatch(ctx, pub) // the events that rode with it, stored alone
	} else {
		if b.feed != nil {
			// After the end's commit, as every entry of the feed (D9),
			// the events that rode with it and the marker in one round
			// trip: the marker carries the outcome just recorded, so a
			// door that relayed the round from the feed answers without
			// reading it back.
			t0 := time.Now()
			err := b.feed.PublishAndEnd(ctx, l.id, pub, outcomeOf(r, w.end.AgentMessages))
			b.metrics.publishSecs.Add(time.Since(t0).Seconds())
			if err != nil {
				l.log.WarnContext(ctx, "live feed end failed", "events", len(pub), "err", err)
			}
		}
		b.metrics.ended.WithLabelValues(string(r.Status)).Inc()
		l.log.InfoContext(ctx, "run ended", "status", string(r.Status), "reason", r.FailureReason)
	}
	b.forget(l)
	return err == nil
}

// outcomeOf is the end marker's outcome: the run as the end's write left
// it, and the agent's messages that write recorded on its thread.
func outcomeOf(r store.Run, msgs []store.Message) livefeed.Outcome {
	o := livefeed.Outcome{Status: string(r.Status), LastSeq: r.LastSeq, FailureReason: r.FailureReason,
		LastActivityAt: r.LastActivityAt}
	if r.Status == run.InputRequired {
		o.Interrupt = r.Interrupt
	}
	if len(msgs) > 0 {
		o.Messages = make([]livefeed.OutcomeMessage, len(msgs))
		for i, m := range msgs {
			o.Messages[i] = livefeed.OutcomeMessage{ID: m.MessageID, Message: m.Message}
		}
	}
	return o
}

// forget is the one funnel that releases everything a run held.
func (b *Broker) forget(l *lane) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l.ended {
		return
	}
	l.ended = true
	l.stopTimers()
	delete(b.lanes, l.id)
	b.unaddressLocked(l)
	b.unlostHeldLocked(l)
	for _, ls := range [2]*linkState{l.claimedBy, l.offeredTo} {
		if ls != nil {
			b.unlinkLocked(ls, l) // the fields stay: the end still reads them
		}
	}
	switch {
	case l.status.Terminal():
		b.ended.add(l.id, l.agent.Key, l.gaveUpOn) // gaveUpOn: unclaimed since (tookClaim)
	case l.status == run.InputRequired && !l.roundQueuedAt.IsZero():
		b.ended.paused(l.id, l.agent.Key, l.roundQueuedAt)
	}
	b.leaveThreadLocked(l)
	key := l.reserved
	if l.offeredTo != nil {
		key = l.offeredTo.key
	}
	if key != "" {
		b.bucketFor(key).release()
		b.holdLocked(l, l.claimedBy, nil)
		l.reserved = ""
		// A freed place is news to every head waiting for that key.
		b.nudgeHeadsOfKeyLocked(key)
		b.wakeSweep()
	}
}
