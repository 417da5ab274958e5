package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// roundWrite is one write of a run's round as the lane decided it: the
// claim that starts the round, provider events admitted from one batch
// (admit), the run's end — any of them, in that order, in one transaction.
type roundWrite struct {
	claim  bool
	events admitted
	// end is how the run ends, nil while it goes on: its move, the events
	// funduq adds (a synthesized RUN_ERROR, after the provider's) and the
	// agent's messages. The provider events that ride with an end were
	// taken in (kept) before it was decided: the end funnel reads them.
	end *store.Conclusion
	// redecide, when set, decides end again (in place) once the store
	// refused some of the events that rode with it: seqs as
	// AppendProviderEventsOnce gave them.
	redecide func(seqs []int)
}

// persist is the lane's one way into PostgreSQL for a round's write. It
// maps w onto the store call that fits — a claim alone is a status write,
// events alone an append, anything with a claim and events or an end a
// conclusion — retried under the lane's epoch with one write key for every
// attempt, so a retry of an attempt that committed before its answer was
// lost stores nothing twice (D13). It returns the run as an end or a claim
// with events left it, and what the live feed publishes, in order: what
// was stored now, never a resend the store already held. Events without an
// end are taken in (kept) once they are stored.
func (l *lane) persist(ctx context.Context, w roundWrite) (store.Run, []livefeed.Published, error) {
	b := l.b
	for _, ls := range w.events.taken { // refused as they were admitted
		l.b.refuse(ls.link, kindEvent, l.id, refusedSeqTaken)
	}
	evs := w.events.evs
	if w.end == nil && len(evs) == 0 {
		if !w.claim {
			return store.Run{}, nil, nil
		}
		return store.Run{}, nil, l.move(ctx, run.Running)
	}
	key := store.NewWriteKey()
	t0 := time.Now() // real time, for the metric: this waits on PostgreSQL
	defer func() {
		if len(evs) > 0 {
			b.metrics.storeSecs.Add(time.Since(t0).Seconds())
		}
	}()
	if w.end == nil && !w.claim {
		seqs, err := l.appendEvents(ctx, key, evs)
		if err != nil {
			return store.Run{}, nil, err
		}
		l.kept(w.events, seqs)
		l.refuseTaken(w.events, seqs)
		return store.Run{}, published(evs, seqs), nil
	}
	c := store.Conclusion{Claim: w.claim, ProviderEvents: evs, WriteKey: key, Move: store.Move{To: run.Running}}
	what := "claim run with its first events"
	if w.end != nil {
		c.Move, c.Events, c.AgentMessages, c.CancelOutranks = w.end.Move, w.end.Events, w.end.AgentMessages, w.end.CancelOutranks
		what = "conclude run"
	}
	c.Move.RunID, c.Move.Writer, c.Move.Epoch = l.id, run.ByBroker, l.epoch
	var r store.Run
	var appended []store.Appended
	err := b.write(ctx, what, func() (err error) {
		r, appended, err = b.st.Conclude(ctx, c)
		return err
	})
	var pub []livefeed.Published
	if errors.Is(err, store.ErrSeqTaken) && ctx.Err() == nil {
		// An end carrying another event under a seq this round took: the
		// events are stored alone, each answered (refuseTaken), and the
		// end is written without them — rare enough for two writes. They
		// were taken in (kept) when the end was decided.
		seqs, aerr := l.appendEvents(ctx, store.NewWriteKey(), evs)
		if aerr != nil {
			return store.Run{}, nil, aerr
		}
		l.refuseTaken(w.events, seqs)
		pub = published(evs, seqs)
		if w.redecide != nil {
			w.redecide(seqs)
			c.Move, c.Events, c.AgentMessages, c.CancelOutranks = w.end.Move, w.end.Events, w.end.AgentMessages, w.end.CancelOutranks
			c.Move.RunID, c.Move.Writer, c.Move.Epoch = l.id, run.ByBroker, l.epoch
		}
		c.ProviderEvents, c.WriteKey = nil, store.NewWriteKey()
		err = b.write(ctx, what, func() (err error) {
			r, appended, err = b.st.Conclude(ctx, c)
			return err
		})
	}
	if err != nil {
		if len(evs) > 0 && w.end != nil && !w.claim && errors.Is(err, store.ErrIllegalTransition) && ctx.Err() == nil {
			// The end was refused, not the events carried with it: they
			// are stored alone, as they would have been without the end.
			seqs, aerr := l.appendEvents(ctx, store.NewWriteKey(), evs)
			if aerr != nil {
				if ctx.Err() == nil {
					l.log.ErrorContext(ctx, "could not store events", "events", len(evs), "err", aerr)
				}
				return store.Run{}, nil, err
			}
			return store.Run{}, published(evs, seqs), err
		}
		return store.Run{}, nil, err
	}
	if w.end == nil {
		l.kept(w.events, nil) // a claim's round has nothing stored before it: all of them
	}
	// A terminal move dropped the KYOK binding in the same transaction.
	b.mu.Lock()
	l.status = r.Status
	if w.end != nil {
		l.roundQueuedAt = r.QueuedAt // the row's, known now even for a lane born from a notice
	}
	b.mu.Unlock()
	for _, a := range appended {
		pub = append(pub, livefeed.Published{Seq: a.Seq, Event: a.Event})
	}
	return r, pub, nil
}

// refuseTaken answers each event of a the store refused for its seq
// (store.SeqTaken): not a resend, and not stored (design.md D7, D15).
func (l *lane) refuseTaken(a admitted, seqs []int) {
	for i, s := range seqs {
		if s == store.SeqTaken && i < len(a.from) && a.from[i] != nil {
			l.b.refuse(a.from[i].link, kindEvent, l.id, refusedSeqTaken)
		}
	}
}

// move writes a status under the lane's epoch.
func (l *lane) move(ctx context.Context, to run.Status) error {
	b := l.b
	attempt := 0
	err := b.write(ctx, fmt.Sprintf("move run to %s", to), func() error {
		attempt++
		// Offering and its requeue are read back at takeover as queued
		// alike: they need not wait for the disk.
		lazy := to == run.Offering || to == run.Queued
		_, err := b.st.Transition(ctx, store.Move{RunID: l.id, To: to, Writer: run.ByBroker, Epoch: l.epoch, Lazy: lazy, Brief: true})
		var te *store.TransitionError
		if attempt > 1 && errors.As(err, &te) && te.From == to {
			// A retry finding the run where this write puts it: the
			// earlier attempt landed and its answer was lost (only this
			// lane moves its run under this epoch).
			return nil
		}
		if to == run.Offering && errors.As(err, &te) && te.From == run.Offering {
			// An earlier attempt landed and its answer was lost (the
			// takeover's read-back requeues every older epoch's offer, so
			// no other writer leaves a run offering under this epoch).
			return nil
		}
		return err
	})
	if err == nil {
		b.mu.Lock()
		l.status = to
		b.mu.Unlock()
	} else if ctx.Err() == nil && !noLongerQueued(to, err) {
		l.log.ErrorContext(ctx, "status write refused", "to", string(to), "err", err)
	}
	return err
}

// noLongerQueued reports whether err refused an offering write, or a
// claim (to running), because the run no longer waits for a provider — it
// ended or paused, or is gone: a late read of it as queued, or a writer
// other than this lane, not a fault of the lane's.
func noLongerQueued(to run.Status, err error) bool {
	if to != run.Offering && to != run.Running {
		return false
	}
	var te *store.TransitionError
	return errors.Is(err, store.ErrNotFound) || (errors.As(err, &te) && (te.From.Terminal() || te.From == run.InputRequired))
}

// appendEvents stores provider events under key; seqs[i] is 0 for an event
// the store already held (a resend).
func (l *lane) appendEvents(ctx context.Context, key string, evs []store.NewEvent) (seqs []int, err error) {
	err = l.b.write(ctx, "append events", func() (err error) {
		seqs, err = l.b.st.AppendProviderEventsOnce(ctx, l.epoch, l.id, key, evs)
		return err
	})
	return seqs, err
}

// published is what the live feed carries of evs stored with seqs.
func published(evs []store.NewEvent, seqs []int) []livefeed.Published {
	pub := make([]livefeed.Published, 0, len(evs))
	for i, seq := range seqs {
		if seq > 0 {
			pub = append(pub, livefeed.Published{Seq: seq, Event: evs[i].Event})
		}
	}
	return pub
}

func (l *lane) publishBatch(ctx context.Context, evs []livefeed.Published) {
	if l.b.feed == nil || len(evs) == 0 {
		return
	}
	t0 := time.Now()
	err := l.b.feed.PublishBatch(ctx, l.id, evs)
	l.b.metrics.publishSecs.Add(time.Since(t0).Seconds())
	if err != nil {
		// The stored events are the record; a live reader falls back to them.
		l.log.WarnContext(ctx, "live feed publish failed", "events", len(evs), "err", err)
	}
}
