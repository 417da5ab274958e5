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

// onEvents stores a batch of events from the run's holder and, when its
// finish came right behind them, settles the run — in the conclude's
// transaction when that is safe.
func (l *lane) onEvents(ctx context.Context, link *linkState, batch []eventCmd, finish bool) {
	if finish && l.settleWith(ctx, batch) {
		link.release(batch...)
		return
	}
	// The backlog counts events not yet stored: it is given back as soon
	// as the batch is, so the link is read again while the batch is
	// published.
	released := false
	l.relay(ctx, batch, func() { released = true; link.release(batch...) })
	if !released {
		link.release(batch...)
	}
	if finish && !l.isEnded() && l.holder(ctx, link) == "" {
		l.settle(ctx)
	}
}

// admitted is a batch of provider events read in order: what to store
// (validated, within the run's limits, resends skipped), their infos, the
// highest provider seq among them, and, when one event stopped the batch,
// why (the events before it are still stored, then the run fails).
type admitted struct {
	evs      []store.NewEvent
	infos    []agui.Info
	idx      []int // the batch index each of evs came from
	pseq     int64
	stop     run.Reason
	stopErr  error
	stopFrom *linkState
	stopAt   int // the batch index of the event that stopped it
}

func (l *lane) admit(batch []eventCmd) admitted {
	a := admitted{evs: make([]store.NewEvent, 0, len(batch)), infos: make([]agui.Info, 0, len(batch)), pseq: l.lastPSeq}
	for i, c := range batch {
		info, err := agui.Validate(c.ev)
		if err != nil {
			a.stop, a.stopErr, a.stopFrom, a.stopAt = run.ReasonMalformedEvent, err, c.link, i
			break
		}
		if c.pseq != nil {
			if *c.pseq <= a.pseq {
				continue // a resend of an event already stored
			}
		}
		if reason, err := l.b.set.Limits.check(c.ev, len(l.events)+len(a.evs)); reason != "" { // limits.go
			a.stop, a.stopErr, a.stopFrom, a.stopAt = reason, err, c.link, i
			break
		}
		if c.pseq != nil {
			a.pseq = *c.pseq
		}
		a.evs = append(a.evs, store.NewEvent{Event: c.ev, ProviderSeq: c.pseq})
		a.infos = append(a.infos, info)
		a.idx = append(a.idx, i)
	}
	return a
}

// relay stores a batch of events from the run's holder in one fenced
// transaction, then publishes them and notes them, in order. Every event is
// stored before it is published (D9). An event that is malformed or breaks
// the run's limits fails the run after the events before it are stored.
func (l *lane) relay(ctx context.Context, batch []eventCmd, stored func()) {
	a := l.admit(batch)
	if len(a.evs) > 0 && !l.store(ctx, a.evs, a.infos, a.pseq, stored) {
		return
	}
	if a.stop != "" {
		// The run fails with the event's reason; the provider did not stop
		// serving, so nothing that withdraws is counted (D18).
		l.log.WarnContext(ctx, "provider event refused; failing the run", "provider_key", a.stopFrom.key, "reason", string(a.stop), "err", a.stopErr)
		l.b.metrics.badEvents.WithLabelValues(string(a.stop)).Inc()
		l.b.refuse(a.stopFrom.link, kindEvent, l.id, fmt.Sprintf("%s: %v", a.stop, a.stopErr))
		for _, after := range batch[a.stopAt+1:] {
			l.b.refuse(after.link.link, kindEvent, l.id, refusedEnded)
		}
		l.fail(ctx, a.stop, false)
	}
}

// store writes evs (validated, infos theirs) and publishes what was stored;
// pseq is the highest provider seq among them. It reports whether the
// write landed.
func (l *lane) store(ctx context.Context, evs []store.NewEvent, infos []agui.Info, pseq int64, stored func()) bool {
	b := l.b
	var seqs []int
	t0 := time.Now() // real time, for the metric: this waits on PostgreSQL
	// One key for every attempt: a retry of an attempt that committed
	// before its answer was lost stores nothing twice (D13).
	key := store.NewWriteKey()
	err := b.write(ctx, "append events", func() (err error) {
		seqs, err = b.st.AppendProviderEventsOnce(ctx, l.epoch, l.id, key, evs)
		return err
	})
	b.metrics.storeSecs.Add(time.Since(t0).Seconds())
	if err != nil {
		if ctx.Err() == nil {
			l.log.ErrorContext(ctx, "could not store events", "events", len(evs), "err", err)
		}
		return false
	}
	l.lastPSeq = pseq
	stored()
	pub := make([]livefeed.Published, 0, len(evs))
	for i, seq := range seqs {
		if seq == 0 {
			continue // already stored: a resend
		}
		pub = append(pub, livefeed.Published{Seq: seq, Event: evs[i].Event})
		l.note(evs[i].Event, infos[i])
	}
	b.metrics.events.Add(float64(len(pub)))
	l.publishBatch(ctx, pub)
	return true
}

// settleWith stores the run's final batch with its end, in the conclude's
// transaction, when it can: every event well-formed, and the lane has
// seen every event this round stored (not read back at takeover, where a
// resend is only known by the store). It reports false, having done
// nothing, otherwise.
func (l *lane) settleWith(ctx context.Context, batch []eventCmd) bool {
	if l.readBack {
		return false
	}
	a := l.admit(batch)
	if a.stop != "" {
		return false // relay stores what precedes it, then fails the run
	}
	evs, infos, pseq := a.evs, a.infos, a.pseq
	l.lastPSeq = pseq
	for i, e := range evs {
		l.note(e.Event, infos[i])
	}
	l.b.metrics.events.Add(float64(len(evs)))
	l.settleEvents(ctx, evs, false)
	return true
}

// observe notes a stored event of this round (read back at takeover).
func (l *lane) observe(ev json.RawMessage) {
	if info, err := agui.Validate(ev); err == nil {
		l.note(ev, info)
	}
}

// note keeps what the settle funnel needs from one stored event.
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
