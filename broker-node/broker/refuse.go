package broker

import (
	"strings"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/wire"
)

// What a provider is told when a report is not taken (D15): an error frame
// naming the run, its message "<kind> refused: <reason>". A log line is not
// an answer. A key that is not the run's own only ever hears refusedUnknown.
const (
	refusedUnknown   = "unknown run"
	refusedOtherLink = "held by another link"
	// refusedEarlierRound: reports read before their link registered,
	// kept, that repeat a round of the run stored before its current one
	// (keep.go staleKept).
	refusedEarlierRound = "it repeats an earlier round of the run, which funduq has already (the run was answered since)"
	refusedAfterEnd     = "the run already reported its end"
	refusedNoOffer      = "no offer out for this run"
	refusedEnded        = "the run has ended"
	refusedNotStored    = "the store did not take the events it came with"
	refusedSeqTaken     = "its seq is already taken by another event of this round; a seq names one event (a resend repeats its JSON value)"
	refusedNULReason    = "its reason holds a NUL character (\\u0000), which funduq cannot store; answer the offer again"
)

// The kinds of report.
const (
	kindAck    = "ack"
	kindEvent  = "event"
	kindFinish = "finish"
)

// refuse answers one report that was not taken. The metric is labelled
// with the reason up to its first colon: the fixed name, never the detail
// after it, which can quote what the provider sent and would let a
// provider mint label values without bound.
func (b *Broker) refuse(l Link, kind, runID, reason string) {
	b.mu.Lock()
	lctx := b.ctx
	b.mu.Unlock()
	if lctx == nil || lctx.Err() != nil {
		// Leadership has ended: the link is closing with "stopped
		// leading; reconnect", and the provider resends what it reported
		// to the next leader. A refusal read before that close would tell
		// it the run is over (our SDK stops resending a finished run on
		// one) when the run has not ended (design.md D7).
		return
	}
	label, _, _ := strings.Cut(reason, ":")
	b.metrics.refusals.WithLabelValues(kind, label).Inc()
	frame, err := wire.Marshal(wire.Error{Type: wire.TypeError, Message: kind + " refused: " + reason, RunID: runID})
	if err == nil {
		_ = l.Send(frame) // a closed link has nobody to tell
	}
	// A refused answer to an offer that moved to another link of its key
	// gives the place kept on l back, the refusal queued first (moved.go).
	b.heardOn(l, runID)
	if kind == kindFinish {
		// A finish of a run funduq failed for a bad event: the place the
		// link kept while unwinding it is free (unwind.go).
		b.heardFinishOn(l, runID)
	}
}

// refuseCmd answers a report the lane read and did not take, and gives an
// event's place in its link's backlog back.
func (l *lane) refuseCmd(c command, reason string) {
	switch c := c.(type) {
	case eventCmd:
		c.link.release(c)
		l.b.refuse(c.link.link, kindEvent, l.id, reason)
	case finishCmd:
		l.b.refuse(c.link.link, kindFinish, l.id, reason)
		c.handled()
	case verdictCmd:
		if reason == refusedEnded {
			l.b.keepLateAcked(c.link.link, l.id, c.v) // before the refusal is queued
		}
		l.b.refuse(c.link.link, kindAck, l.id, reason)
	}
}

// strangerSafe is what ls may be told about this run: a key that is not the
// run's agent's learns nothing beyond "unknown run".
func (l *lane) strangerSafe(ls *linkState, reason string) string {
	if ls.key != l.agent.Key {
		return refusedUnknown
	}
	return reason
}

// reportedEnd reports whether the run's terminal event is stored.
func (l *lane) reportedEnd() bool { return l.sawFinish || l.sawError }

// cutAfterEnd refuses the events of batch that come after the run's
// terminal event (stored already, or earlier in the batch): nothing is ever
// stored after it. It returns the events to keep.
func (l *lane) cutAfterEnd(batch []eventCmd) []eventCmd {
	end := l.reportedEnd()
	for i, c := range batch {
		if end {
			for _, late := range batch[i:] {
				l.refuseCmd(late, refusedAfterEnd)
			}
			return batch[:i]
		}
		typ, _ := wire.PeekType(c.ev)
		end = typ == agui.TypeRunFinished || typ == agui.TypeRunError
	}
	return batch
}

// noLaneReason is the refusal of a report for a run no lane here takes:
// "the run has ended" to the key serving its agent when this broker saw
// the run end or pause (a resend after a takeover that ended it from its
// stored terminal event, a finish sent twice), refusedUnknown to anyone
// else and for a run it never saw end.
func (b *Broker) noLaneReason(l Link, runID string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended.endedFor(runID, l.Key()) {
		return refusedEnded
	}
	return refusedUnknown
}
