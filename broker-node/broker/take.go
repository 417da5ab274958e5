package broker

import (
	"context"
	"math"

	"github.com/funduq/funduq-go/broker-node/intake"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// newLane is a lane for r, not yet registered or running. Its lines name
// the run, its thread, its provider and the epoch it is led under, as the
// record's writes are fenced by it (docs/design.md §Logs). Caller does not
// hold b.mu.
func (b *Broker) newLane(r store.Run) *lane {
	b.mu.Lock()
	epoch := b.epoch
	b.mu.Unlock()
	return &lane{b: b, id: r.RunID, threadID: r.ThreadID, agent: AgentRef{r.ProviderKey, r.AgentName},
		input: r.RunInput, addressed: r.AddressedRunID, queuedAt: b.clock.Now(), roundQueuedAt: r.QueuedAt,
		q: newQueue(), status: r.Status, lastPSeq: math.MinInt64,
		log: b.log.With("run_id", r.RunID, "thread_id", r.ThreadID, "agent", r.AgentName, "provider_key", r.ProviderKey, "epoch", epoch)}
}

// take brings a queued run into a lane: where "served" is decided (D8). A
// run arriving while nobody serves its agent fails agent_offline at once —
// unless it was read back at takeover, or arrives within provider_grace of
// it, while providers are still reconnecting: those wait on the unserved
// clock.
func (b *Broker) take(r store.Run, readBack bool) {
	if r.Status != run.Queued {
		return
	}
	open := func() bool { return b.leading && b.lanes[r.RunID] == nil && !b.ended.over(r) }
	b.mu.Lock()
	ok := open()
	b.mu.Unlock()
	if !ok {
		return
	}
	// Built outside the broker's lock, which every lane takes: the lane
	// decodes the run's input and formats its logger's attributes.
	l := b.newLane(r)
	kept := readBack && b.targetKept(r)
	b.mu.Lock()
	if !open() {
		b.mu.Unlock()
		return
	}
	l.cancelRequested = r.CancelRequestedBy != nil
	l.readBack = readBack
	b.addLaneLocked(l)
	b.lanesWG.Add(1)
	served := b.served[l.agent] != nil
	// Around a takeover a run waits only for a provider expected back: one
	// that served the agent when the previous leader went away. With a
	// provider_grace, it waits at most until the grace ends (the sweep).
	inGrace := b.clock.Now().Before(b.takeoverAt.Add(b.set.ProviderGrace))
	expected := b.expected[l.agent]
	waiting := (readBack || inGrace) && expected
	l.graceWait = waiting && inGrace
	if readBack && (b.set.ProviderGrace <= 0 || !expected) {
		// A run read back was waiting when the previous leader went away
		// (or was queued while nobody led): it waits on, on the unserved
		// clock from the takeover (D7, seed 001), for a provider that
		// left before the takeover to come back. Only a run arriving
		// around the takeover for an agent nobody served fails at once.
		waiting = true
	}
	// Its agent's link was lost without a close frame moments ago: the
	// key is expected back within the link grace (D5), so the run waits
	// that long rather than failing agent_offline while it reconnects.
	if until, ok := b.lostUntil[l.agent]; ok && !served && b.clock.Now().Before(until) {
		waiting, l.linkWait, l.linkUntil = true, true, until
	}
	if b.requeued[r.RunID] {
		// An older epoch's offer: its provider may be running it (keepPlace).
		delete(b.requeued, r.RunID)
		if b.expected[l.agent] {
			l.keepPlaceLocked(r.ProviderKey, b.takeoverAt.Add(b.set.ProviderGrace).Sub(b.clock.Now()))
		}
	}
	lost := readBack && !kept && b.interjectionLostLocked(l.addressed)
	b.joinThreadLocked(l, l.queuedAt)
	switch {
	case lost:
		l.q.push(failCmd{run.ReasonInterjectionTargetLost})
	case l.cancelRequested:
		l.q.push(cancelCmd{})
	case !served && !waiting:
		l.q.push(failCmd{run.ReasonAgentOffline})
	default:
		if b.threads[l.threadID][0] == l || l.addressed != "" {
			b.nudgeLocked(l)
		}
	}
	ctx := b.ctx
	b.mu.Unlock()
	go l.loop(ctx)
}

// targetKept reports whether a read-back interjection's target is a run that
// did not die with the old leader though it has no lane: paused (D7 leaves
// input-required runs untouched), queued again by an answer and not yet
// read back, or settled before the takeover other than by it. Seed 001
// loses only an interjection "whose target died with the process"; for the
// others the interjection is an ordinary turn, as it is without a takeover
// (doors.md §3.6). A target the takeover did orphan fails its interjections
// when its grace ends (hold.go). Read outside the broker's lock; a failed
// read leaves the lane check alone to decide.
func (b *Broker) targetKept(r store.Run) bool {
	if r.AddressedRunID == "" {
		return false
	}
	b.mu.Lock()
	ctx, epoch := b.ctx, b.epoch
	b.mu.Unlock()
	t, err := b.st.GetRun(ctx, r.AddressedRunID)
	if err != nil {
		b.log.WarnContext(ctx, "an interjection's target could not be read", "run_id", r.RunID, "thread_id", r.ThreadID,
			"addressed_run_id", r.AddressedRunID, "epoch", epoch, "err", err)
		return false
	}
	switch t.Status {
	case run.InputRequired, run.Queued, run.Completed, run.Cancelled:
		return true
	case run.Failed:
		// Orphaned only in funduq's own words: a provider may fail its
		// run with the same text, and that run did not die with the process.
		return t.FailureReason != string(run.ReasonOrphanedByRestart) || t.FailureByProvider
	}
	return false
}

// ---- notices: the broker is the intake listener's handler ----

var _ intake.Handler = (*Broker)(nil)

// Notify takes one door notification.
func (b *Broker) Notify(ctx context.Context, n intake.Notice) {
	switch n.Kind {
	case intake.Queued, intake.Resumed:
		if n.Run != nil {
			b.take(*n.Run, false) // the row as the door queued it
			return
		}
		b.takeByID(ctx, n.RunID)
	case intake.Cancel:
		b.mu.Lock()
		l := b.lanes[n.RunID]
		b.mu.Unlock()
		if l != nil {
			if b.cancelStands(ctx, n.RunID) {
				l.q.push(cancelCmd{})
			}
			return
		}
		b.takeByID(ctx, n.RunID) // a queued run not yet taken is taken cancelled
	}
}

// cancelStands reports whether a cancel notice still speaks for the run's
// row. A notice can arrive after the round it was asked of paused and an
// answer reopened the run, which clears the request (store.ReopenRun): it
// must not cancel the answer's round (design.md D1). A row that cannot
// be read is taken as asking: a lost cancel is worse than a late one.
func (b *Broker) cancelStands(ctx context.Context, runID string) bool {
	r, err := b.st.GetRun(ctx, runID)
	if err != nil {
		b.log.WarnContext(ctx, "a cancel's run could not be read: passing the cancel on", "run_id", runID, "err", err)
		return true
	}
	if r.CancelRequestedBy == nil {
		b.log.InfoContext(ctx, "a cancel notice outlived its request: the run was reopened since", "run_id", runID,
			"thread_id", r.ThreadID, "status", r.Status)
		return false
	}
	return true
}

func (b *Broker) takeByID(ctx context.Context, runID string) {
	r, err := b.st.GetRun(ctx, runID)
	if err != nil {
		b.log.WarnContext(ctx, "notified run could not be read", "run_id", runID, "err", err)
		return
	}
	b.take(r, false)
}

// takeQueued takes every queued run (take skips those already in a lane),
// reading the queue in pages of QueuePage, oldest first, each after the
// last run of the one before (design.md D7), and says how many it read. Each page's read goes through read: the takeover's is retried
// as the leader's writes are, a catch-up's is not (the next one retries).
func (b *Broker) takeQueued(ctx context.Context, readBack bool, read func(func() error) error) (int, error) {
	var after store.QueueCursor
	n := 0
	for {
		var page []store.Run
		err := read(func() (err error) {
			page, err = b.st.QueuedRuns(ctx, after, b.set.QueuePage)
			return err
		})
		if err != nil {
			return n, err
		}
		for _, r := range page {
			b.take(r, readBack)
		}
		n += len(page)
		if len(page) < b.set.QueuePage {
			return n, nil
		}
		after = page[len(page)-1].QueueCursor()
	}
}

// CatchUp finds what notifications may have missed: queued runs not in a
// lane, and cancel requests the lanes have not heard.
func (b *Broker) CatchUp(ctx context.Context, reason string) {
	// A catch-up cut short by the leadership's or the node's end is no
	// failure: the next leader catches up (not a WARN on every stop).
	if _, err := b.takeQueued(ctx, false, func(read func() error) error { return read() }); err != nil {
		if ctx.Err() == nil {
			b.log.WarnContext(ctx, "catch-up failed", "reason", reason, "epoch", b.writeEpoch.Load(), "err", err)
		}
		return
	}
	ids, err := b.st.CancelRequestedActive(ctx)
	if err != nil {
		if ctx.Err() == nil {
			b.log.WarnContext(ctx, "catch-up of cancels failed", "reason", reason, "epoch", b.writeEpoch.Load(), "err", err)
		}
		return
	}
	b.mu.Lock()
	for _, id := range ids {
		if l := b.lanes[id]; l != nil && !l.cancelRequested && !l.ended {
			l.q.push(cancelCmd{})
		}
	}
	b.mu.Unlock()
}

// keyAttr names a provider key on a lane's line: nothing when it is the
// run's own provider (the lane's logger names it as provider_key already,
// and a repeated key makes a JSON line ambiguous to log readers), else
// other_provider_key — a link of another key reporting for the run.
func (l *lane) keyAttr(key string) []any {
	if key == l.agent.Key {
		return nil
	}
	return []any{"other_provider_key", key}
}
