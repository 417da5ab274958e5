package broker

import (
	"context"
	"fmt"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// recover reads back what earlier leaders left (D7): agents they served are
// unserved now; offers they had out go back to queued; runs their providers
// held wait provider_grace for the provider to re-attach and report; queued
// runs re-enter their lanes oldest first, on the unserved clock from now.
// Paused runs are untouched.
func (b *Broker) recover(ctx context.Context) error {
	b.mu.Lock()
	epoch := b.epoch
	b.mu.Unlock()
	var expected []store.ServedAgent
	if err := b.write(ctx, "forget older rosters", func() (err error) {
		expected, err = b.st.ForgetServedBefore(ctx, epoch, b.set.LeaseTTL, b.set.ProviderGrace)
		return err
	}); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	// Agents served when the previous leader went away: their providers
	// are expected back within provider_grace. A run for any other agent
	// fails agent_offline at once (deliverable 5 of issue #21).
	b.mu.Lock()
	for _, a := range expected {
		b.expected[AgentRef{a.ProviderKey, a.Name}] = true
		b.inherited[AgentRef{a.ProviderKey, a.Name}] = true
	}
	b.mu.Unlock()
	var held []store.Run
	err := b.write(ctx, "list held runs", func() (err error) {
		held, err = b.st.RunsInStatus(ctx, string(run.Offering), string(run.Running), string(run.Cancelling))
		return err
	})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	requeued, orphans := 0, 0
	for _, r := range held {
		if r.Status == run.Offering {
			err := b.write(ctx, "requeue an older offer", func() error {
				_, err := b.st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Queued, Writer: run.ByBroker, Epoch: epoch})
				return err
			})
			if err == nil {
				requeued++
				b.mu.Lock()
				if b.requeued == nil {
					b.requeued = map[string]bool{}
				}
				b.requeued[r.RunID] = true
				b.mu.Unlock()
			}
			continue
		}
		b.adoptLater(ctx, r)
		orphans++
	}
	queued, err := b.takeQueued(ctx, true, func(read func() error) error { return b.write(ctx, "list queued runs", read) })
	b.mu.Lock()
	b.requeued = nil // a run not taken meanwhile ended: nothing to keep
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	b.log.InfoContext(ctx, "runs read back", "queued", queued, "offers_requeued", requeued,
		"held_awaiting_provider", orphans, "provider_grace", b.set.ProviderGrace.String(), "epoch", epoch)
	return nil
}

// adoptLater opens a lane for a run an older epoch's provider held. Its
// provider may re-adopt it within provider_grace by reporting for it;
// otherwise it fails orphaned_by_funduq_restart.
func (b *Broker) adoptLater(ctx context.Context, r store.Run) {
	l := b.newLane(r)
	// What this round already stored: a provider that streamed its
	// terminal event before the old leader died has said how the run ends,
	// even if its finish frame was lost with the old leader.
	// Read in pages: a long round is never one query nor one slice.
	for after := r.RoundSeq; ; {
		evs, err := b.st.EventsAfter(ctx, r.RunID, after, readBackEventsPage)
		if err != nil {
			l.log.WarnContext(ctx, "could not read a held run's events back", "err", err)
			break
		}
		for _, e := range evs {
			l.observe(e.Event)
		}
		if len(evs) < readBackEventsPage {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	b.mu.Lock()
	l.orphan, l.adoptKey, l.heldBack = true, r.ProviderKey, true
	// Its provider is presumed to be running it still: the place is kept
	// for it until it re-adopts the run or the grace ends.
	l.reserved = r.ProviderKey
	b.bucketFor(r.ProviderKey).inFlight++
	l.cancelRequested = r.CancelRequestedBy != nil
	b.addLaneLocked(l)
	b.lanesWG.Add(1)
	b.mu.Unlock()
	if l.sawFinish || l.sawError {
		l.q.push(storedEndCmd{})
	} else if b.set.ProviderGrace <= 0 {
		l.q.push(orphanCmd{})
	} else {
		l.orphanT = b.clock.AfterFunc(b.set.ProviderGrace, func() { l.q.push(orphanCmd{}) })
	}
	go l.loop(b.ctxOf())
}

func (b *Broker) ctxOf() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ctx
}

// readBackEventsPage bounds the events one read takes when a held run's
// round is read back at takeover.
const readBackEventsPage = 1000
