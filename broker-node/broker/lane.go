package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// lane is one run's owner. Its goroutine reads only its own queue.
type lane struct {
	b        *Broker
	id       string
	threadID string
	agent    AgentRef
	input    json.RawMessage
	// addressed is the live run an interjection addresses
	// (forwardedProps.funduq.addressedRunId); "" for an ordinary turn.
	addressed string
	readBack  bool      // taken at takeover from an earlier leader's rows
	queuedAt  time.Time // broker clock: when this round entered dispatch
	// roundQueuedAt is the round's queued_at as its row says (zero when
	// the lane came from a notice's payload, until its end is written):
	// what tells this round from the next one of the same run (ended.go).
	roundQueuedAt time.Time
	q             *queue
	log           *slog.Logger

	// Guarded by b.mu: read by the roster, the sweep and intake.
	status          run.Status
	dispatchPending bool
	offeredTo       *linkState // a place is held on this link's key
	claimedBy       *linkState
	claimedAt       time.Time
	noted           bool // abandoned or undelivered already counted for this run
	expirySent      bool
	graceWait       bool // waiting within provider_grace for a provider expected back
	cancelRequested bool
	endStored       bool   // the run's terminal event is stored (the sweep reads it)
	orphan          bool   // held by an older epoch, awaiting re-adoption (D7)
	adoptKey        string // the key that may re-adopt it
	// linkLost: the orphan's link was lost without a close frame; when
	// the link grace passes it fails provider_left_holding_it and counts
	// abandoned against adoptKey (D5).
	linkLost bool
	// reserved is the key whose bucket keeps a place for this orphan: its
	// provider is presumed still running it (a lost link, a takeover), so
	// a re-attached link of the key is not offered that place meanwhile —
	// it would decline, and a decline with room counts misdeclared. The
	// re-adoption takes the place over; forget gives it back.
	reserved string
	// linkWait: queued while its agent's link was lost without a close
	// frame; it waits for the key until linkUntil (the link grace), then
	// fails agent_offline (the sweep), as a run does around a takeover.
	linkWait  bool
	linkUntil time.Time
	ended     bool

	// The lane goroutine's own.
	offer      *offerState
	offerSeq   uint64
	deferred   []any
	orphanT    clockwork.Timer
	sawFinish  bool
	sawError   bool
	errReason  string
	interrupts json.RawMessage
	events     []json.RawMessage // this round's events, for folding
	lastPSeq   int64
	// gaveUpOn is the key an offer of this run lapsed on: a report from it
	// afterwards is an answer funduq had stopped waiting for (answered_late).
	gaveUpOn string
}

type offerState struct {
	id    uint64
	link  *linkState
	timer clockwork.Timer
	sent  time.Time // real time, to tell a broker that ran late (onLapse)
	// rechecked: the lapse was put off once because the broker ran late.
	rechecked bool
}

// lapseSlack is how long a lapse that fired late is put off so the link's
// reader can hand over what the provider answered meanwhile (onLapse).
const lapseSlack = 250 * time.Millisecond

func (l *lane) stopTimers() {
	if l.offer != nil && l.offer.timer != nil {
		l.offer.timer.Stop()
	}
	if l.orphanT != nil {
		l.orphanT.Stop()
	}
}

func (l *lane) loop(ctx context.Context) {
	defer l.b.lanesWG.Done()
	defer l.drop()
	for !l.isEnded() {
		c, ok := l.q.pop(ctx)
		if !ok {
			return // leadership ended: the next leader reads the run back
		}
		l.handle(ctx, c)
		l.q.done()
	}
}

// drop runs when the lane stops reading: later pushes are refused, and the
// reports still waiting are answered (the run has ended) and give their
// links' backlog back.
func (l *lane) drop() {
	for _, c := range append(l.q.close(), l.deferred...) {
		l.refuseCmd(c, refusedEnded)
	}
	l.deferred = nil
}

func (l *lane) isEnded() bool {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.ended
}

// handle applies one command. While an offer is out, only its answer (or
// what stands for one) is read; the rest waits behind it, in order.
func (l *lane) handle(ctx context.Context, c any) {
	if l.offer != nil && !l.answers(c) {
		l.deferred = append(l.deferred, c)
		return
	}
	switch c := c.(type) {
	case tryCmd:
		l.try(ctx)
	case verdictCmd:
		l.onVerdict(ctx, c)
	case lapseCmd:
		l.onLapse(ctx, c)
	case eventCmd:
		if why := l.holder(ctx, c.link); why != "" {
			l.refuseCmd(c, why)
			break
		}
		if l.reportedEnd() {
			l.refuseCmd(c, refusedAfterEnd)
			break
		}
		// What else the link sent meanwhile is stored with it, in one
		// transaction: the batch grows while PostgreSQL is slow. Not while
		// commands deferred behind an offer wait: they come first.
		batch := []eventCmd{c}
		finish := false
		if len(l.deferred) == 0 {
			batch = append(batch, l.q.takeEvents(c.link, maxEventBatch-1)...)
			// The run's end right behind its last events: both in one
			// transaction when that is safe.
			finish = l.q.takeFinish(c.link)
		}
		l.onEvents(ctx, c.link, l.cutAfterEnd(batch), finish)
	case finishCmd:
		if why := l.holder(ctx, c.link); why != "" {
			l.refuseCmd(c, why)
		} else {
			l.settle(ctx)
		}
	case cancelCmd:
		l.onCancel(ctx)
	case goneCmd:
		l.onGone(ctx, c)
	case failCmd:
		l.fail(ctx, c.reason, false) // funduq's own verdict: nobody stopped serving
	case expireCmd:
		l.onExpire(ctx)
	case orphanCmd:
		l.onOrphanTimeout(ctx)
	case storedEndCmd:
		if l.reportedEnd() {
			l.log.InfoContext(ctx, "run's terminal event is stored and its finish did not come: settling it")
			l.settle(ctx)
		}
	}
	// A verdict settles the offer: what waited behind it is read now, in
	// order, unless a new offer went out meanwhile.
	for l.offer == nil && len(l.deferred) > 0 && !l.isEnded() {
		next := l.deferred[0]
		l.deferred = l.deferred[1:]
		l.handle(ctx, next)
	}
}

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

// answers reports whether c speaks to the offer that is out.
func (l *lane) answers(c any) bool {
	switch c := c.(type) {
	case verdictCmd, lapseCmd:
		return true
	case eventCmd:
		return c.link == l.offer.link
	case finishCmd:
		return c.link == l.offer.link
	case goneCmd:
		return c.link == l.offer.link
	}
	return false
}

// move writes a status under the broker's epoch.
func (l *lane) move(ctx context.Context, to run.Status) error {
	b := l.b
	b.mu.Lock()
	epoch := b.epoch
	b.mu.Unlock()
	attempt := 0
	err := b.write(ctx, fmt.Sprintf("move run to %s", to), func() error {
		attempt++
		// Offering and its requeue are read back at takeover as queued
		// alike: they need not wait for the disk.
		lazy := to == run.Offering || to == run.Queued
		_, err := b.st.Transition(ctx, store.Move{RunID: l.id, To: to, Writer: run.ByBroker, Epoch: epoch, Lazy: lazy, Brief: true})
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
	} else if ctx.Err() == nil && !settledAlready(to, err) {
		l.log.ErrorContext(ctx, "status write refused", "to", string(to), "err", err)
	}
	return err
}

// settledAlready reports whether err refused an offering write because the
// run has settled (or is gone): a late read of it as queued, not a fault.
func settledAlready(to run.Status, err error) bool {
	if to != run.Offering {
		return false
	}
	var te *store.TransitionError
	return errors.Is(err, store.ErrNotFound) || (errors.As(err, &te) && (te.From.Terminal() || te.From == run.InputRequired))
}

// ---- offering ----

// try is the try predicate and, when it holds, the offer: not dispatched,
// its thread's head, its agent served, and a place on the provider — the
// place taken in the same step as the check.
func (l *lane) try(ctx context.Context) {
	b := l.b
	b.mu.Lock()
	l.dispatchPending = false
	if l.ended || l.offeredTo != nil || l.claimedBy != nil || l.orphan {
		b.mu.Unlock()
		return
	}
	ls := b.interjectionTargetLocked(l)
	if ls == nil {
		dq := b.threads[l.threadID]
		if len(dq) == 0 || dq[0] != l {
			b.mu.Unlock()
			return
		}
		ls = b.served[l.agent]
	}
	if ls == nil {
		b.mu.Unlock()
		return
	}
	bk := b.bucketFor(ls.key)
	if !bk.hasRoom() {
		b.mu.Unlock()
		return
	}
	bk.inFlight++
	l.offeredTo = ls
	b.mu.Unlock()

	threadID := l.threadID
	// The clock starts before the frame leaves: an answer can never beat it.
	l.offerSeq++
	id := l.offerSeq
	l.offer = &offerState{id: id, link: ls, sent: time.Now()}
	l.offer.timer = b.clock.AfterFunc(b.set.DeliverTimeout, func() { l.q.push(lapseCmd{id}) })
	frame, err := wire.Marshal(wire.NewRunFrame(wire.DeliveredRun{RunID: l.id, AgentName: l.agent.Name,
		RunInput: l.input, ThreadID: &threadID}))
	if err == nil {
		// Written by this goroutine when the link is idle: the writer's
		// wake-up was the longest step between the notice and the frame.
		err = ls.link.SendNow(frame)
	}
	if err != nil {
		l.log.WarnContext(ctx, "offer could not be sent; the run stays queued", "link", ls.id, "err", err)
		l.dropOffer()
		return
	}
	// The frame leaves before the offering write is made, so the two go
	// out side by side and the provider does not wait for PostgreSQL.
	// Nothing the provider answers is read before the write has returned
	// (the lane reads its queue after try), so every verdict still meets
	// the run as offering.
	if err := l.move(ctx, run.Offering); err != nil {
		l.dropOffer()
		l.withdraw(ctx, ls, err)
		if settledAlready(run.Offering, err) {
			// The run is not waiting any more (read as queued after its
			// lane had already run it): the record is the truth.
			l.log.InfoContext(ctx, "run is no longer queued; its lane closes", "err", err)
			b.forget(l)
		}
		return
	}
	b.metrics.offers.WithLabelValues("sent").Inc()
	l.log.DebugContext(ctx, "run offered", "link", ls.id)
}

// dropOffer ends an offer that never counted: its clock stops and its
// place comes back; the record was not moved.
func (l *lane) dropOffer() {
	l.offer.timer.Stop()
	l.offer = nil
	l.releasePlace()
}

// withdraw takes back an offer whose offering write was refused: the
// provider is asked to cancel the run (a cancel for a run it never took
// is a no-op for it), and whatever it answers finds no offer out. A
// broker that lost its epoch or its context closes the links instead.
func (l *lane) withdraw(ctx context.Context, ls *linkState, err error) {
	if ctx.Err() != nil || errors.Is(err, store.ErrStaleEpoch) {
		return
	}
	l.b.metrics.offers.WithLabelValues("withdrawn").Inc()
	frame, _ := wire.Marshal(wire.Cancel{Type: wire.TypeCancel, RunID: l.id})
	if err := ls.link.Send(frame); err != nil {
		l.log.WarnContext(ctx, "offer withdrawal could not be sent", "link", ls.id, "err", err)
		return
	}
	l.log.InfoContext(ctx, "offer withdrawn: the record refused it", "provider_key", ls.key, "link", ls.id)
}

// interjectionTargetLocked returns the link an interjection goes straight
// to: the one holding the run it addresses, while that run is claimed and
// its agent takes interjections. Otherwise nil: the run is an ordinary
// turn (a target that settled first degrades it to one). Caller holds b.mu.
func (b *Broker) interjectionTargetLocked(l *lane) *linkState {
	if l.addressed == "" {
		return nil
	}
	t := b.lanes[l.addressed]
	if t == nil || t.ended || t.claimedBy == nil || t.threadID != l.threadID {
		return nil
	}
	ls := t.claimedBy
	if b.served[l.agent] != ls || !ls.interjections[l.agent.Name] {
		return nil
	}
	return ls
}

func (l *lane) releasePlace() {
	b := l.b
	b.mu.Lock()
	if l.offeredTo != nil {
		b.bucketFor(l.offeredTo.key).release()
		l.offeredTo = nil
	}
	b.mu.Unlock()
}

// handBack ends the offer without a claim: the place comes back and the run
// is queued again. Nothing re-nudges it; it waits for something to change.
// It reports whether the provider had room after the release.
func (l *lane) handBack(ctx context.Context) (room bool) {
	if l.offer != nil {
		l.offer.timer.Stop()
		l.offer = nil
	}
	b := l.b
	b.mu.Lock()
	if l.offeredTo != nil {
		bk := b.bucketFor(l.offeredTo.key)
		bk.release()
		room = bk.hasRoom()
		l.offeredTo = nil
	}
	b.mu.Unlock()
	_ = l.move(ctx, run.Queued)
	return room
}

func (l *lane) onVerdict(ctx context.Context, c verdictCmd) {
	if l.offer == nil && c.v == wire.Accepted {
		// Not an answer to an offer: the provider saying it holds the
		// run — read as a report (D15): it re-adopts a run held across a
		// takeover (D7), and claims one nobody holds when it comes from
		// the key serving the agent (the late-ack rule, D15).
		if why := l.holder(ctx, c.link); why != "" {
			l.refuseCmd(c, why)
		}
		return
	}
	if l.offer == nil || c.link != l.offer.link {
		// An answer to an offer that is no longer out (it lapsed, or
		// went to another link).
		l.refuseCmd(c, l.strangerSafe(c.link, refusedNoOffer))
		return
	}
	key := c.link.key
	switch c.v {
	case wire.Accepted:
		l.offer.timer.Stop()
		l.offer = nil
		l.b.metrics.offers.WithLabelValues("accepted").Inc()
		l.claim(ctx, c.link, run.Offering, true)
	case wire.Declined:
		l.b.metrics.offers.WithLabelValues("declined").Inc()
		// A link that took the agent out of service after the offer
		// left (deleteAgent, a register without it) declines what it no
		// longer serves: not a misdeclaration (design.md §Counters).
		l.b.mu.Lock()
		serving := l.b.served[l.agent] == c.link
		l.b.mu.Unlock()
		if l.handBack(ctx) && serving {
			// It declined while funduq believed it had room: counted,
			// not believed — its declaration stands.
			l.log.WarnContext(ctx, "provider declined with room", "provider_key", key)
			l.b.count(ctx, key, store.Misdeclared)
		}
	case wire.Refused:
		l.offer.timer.Stop()
		l.offer = nil
		l.b.metrics.offers.WithLabelValues("refused").Inc()
		l.log.InfoContext(ctx, "provider refused the run", "provider_key", key, "reason", c.reason)
		// The place stays held until the run is forgotten.
		l.fail(ctx, run.Reason(c.reason), false)
	}
}

func (l *lane) onLapse(ctx context.Context, c lapseCmd) {
	if l.offer == nil || l.offer.id != c.offer {
		return
	}
	if !l.offer.rechecked && time.Since(l.offer.sent) > l.b.set.DeliverTimeout+lapseSlack {
		// The broker itself ran late — frozen (SIGSTOP) or starved of CPU
		// past the deadline — so an answer the provider sent in time may
		// still be unread on its link: counting unanswered now would blame
		// the provider for funduq's stall (D6 counts what funduq observes).
		// Put off once, on real time, for the reader to catch up.
		l.offer.rechecked = true
		id := l.offer.id
		time.AfterFunc(lapseSlack, func() { l.q.push(lapseCmd{id}) })
		l.log.InfoContext(ctx, "offer lapsed while the broker ran late; waiting a moment for an answer already sent",
			"late_by", (time.Since(l.offer.sent) - l.b.set.DeliverTimeout).Round(time.Millisecond).String())
		return
	}
	key := l.offer.link.key
	l.b.metrics.offers.WithLabelValues("unanswered").Inc()
	l.gaveUpOn = key
	l.handBack(ctx)
	l.log.WarnContext(ctx, "offer unanswered; run back to queued", "provider_key", key)
	l.b.count(ctx, key, store.Unanswered)
}

// claim records that ls accepted the run (from offering, or queued for a
// late ack): it leaves its thread's queue and the next utterance is offered.
// With queued, what the link sent right behind its accept — events, and
// its finish — is written with the claim, in one transaction.
func (l *lane) claim(ctx context.Context, ls *linkState, from run.Status, queued bool) {
	var batch []eventCmd
	finish := false
	if queued && len(l.deferred) == 0 {
		batch = l.q.takeEvents(ls, maxEventBatch)
		finish = l.q.takeFinish(ls)
	}
	if len(batch) == 0 && !finish {
		// The record says running before the next utterance can be offered.
		if l.move(ctx, run.Running) == nil {
			l.tookClaim(ctx, ls, from)
			if l.cancelRequested {
				l.onCancel(ctx)
			}
		}
		return
	}
	l.events = nil // a new round: the per-run limits count from here
	a := l.admit(batch)
	if a.stop != "" || l.readBack {
		// A refused event fails the run after what precedes it is stored:
		// the claim goes alone, then the batch as any other.
		if l.move(ctx, run.Running) != nil {
			ls.release(batch...)
			return
		}
		l.tookClaim(ctx, ls, from)
		if l.cancelRequested {
			l.onCancel(ctx)
		}
		l.onEvents(ctx, ls, batch, finish)
		return
	}
	if finish {
		// The whole round at once: claim, events, end.
		l.tookClaim(ctx, ls, from)
		l.lastPSeq = a.pseq
		for i, e := range a.evs {
			l.note(e.Event, a.infos[i])
		}
		l.b.metrics.events.Add(float64(len(a.evs)))
		l.settleEvents(ctx, a.evs, true)
		ls.release(batch...)
		return
	}
	// The run's terminal event with no finish behind it yet is held back
	// to go with the end (the finish follows it on the link), so no door
	// sees the round's last event before its end is recorded.
	var held []eventCmd
	if j := terminalAt(a.infos); j >= 0 {
		held, batch = batch[a.idx[j]:], batch[:a.idx[j]]
		a.evs, a.infos, a.pseq = a.evs[:j], a.infos[:j], l.lastPSeq
		for _, e := range a.evs {
			if e.ProviderSeq != nil && *e.ProviderSeq > a.pseq {
				a.pseq = *e.ProviderSeq
			}
		}
	}
	if len(a.evs) == 0 {
		if l.move(ctx, run.Running) != nil {
			ls.release(append(batch, held...)...)
			return
		}
		l.tookClaim(ctx, ls, from)
		if l.cancelRequested {
			l.onCancel(ctx)
		}
		ls.release(batch...)
		l.onEvents(ctx, ls, held, l.q.takeFinish(ls))
		return
	}
	b := l.b
	b.mu.Lock()
	epoch := b.epoch
	b.mu.Unlock()
	var appended []store.Appended
	t0 := time.Now()
	key := store.NewWriteKey()
	err := b.write(ctx, "claim run with its first events", func() (err error) {
		_, appended, err = b.st.Conclude(ctx, store.Conclusion{Claim: true, ProviderEvents: a.evs, WriteKey: key,
			Move: store.Move{RunID: l.id, To: run.Running, Writer: run.ByBroker, Epoch: epoch}})
		return err
	})
	b.metrics.storeSecs.Add(time.Since(t0).Seconds())
	ls.release(batch...)
	if err != nil {
		ls.release(held...)
		if ctx.Err() == nil {
			l.log.ErrorContext(ctx, "claim refused", "err", err)
		}
		return
	}
	b.mu.Lock()
	l.status = run.Running
	b.mu.Unlock()
	l.tookClaim(ctx, ls, from)
	l.lastPSeq = a.pseq
	for i, e := range a.evs {
		l.note(e.Event, a.infos[i])
	}
	pub := make([]livefeed.Published, len(appended))
	for i, ap := range appended {
		pub[i] = livefeed.Published{Seq: ap.Seq, Event: ap.Event}
	}
	b.metrics.events.Add(float64(len(pub)))
	l.publishBatch(ctx, pub)
	if l.cancelRequested {
		l.onCancel(ctx)
	}
	switch {
	case len(held) == 0:
	case l.isEnded():
		ls.release(held...)
	default:
		l.onEvents(ctx, ls, held, l.q.takeFinish(ls))
	}
}

// terminalAt is the index of the first RUN_FINISHED or RUN_ERROR among
// infos, or -1.
func terminalAt(infos []agui.Info) int {
	for i, in := range infos {
		if in.RunFinished || in.RunError {
			return i
		}
	}
	return -1
}

// claimed is the lane's side of a claim the record holds (or is about to,
// in the same transaction as the run's end): the run leaves its thread's
// queue, the next utterance and interjections waiting for it are nudged.
func (l *lane) tookClaim(ctx context.Context, ls *linkState, from run.Status) {
	b := l.b
	b.mu.Lock()
	l.claimedBy = ls
	l.claimedAt = b.clock.Now()
	b.leaveThreadLocked(l)
	for _, other := range b.addressing[l.id] { // interjections waiting for this run to be live
		b.nudgeLocked(other)
	}
	b.mu.Unlock()
	l.events = nil
	l.log.InfoContext(ctx, "run claimed", "provider_key", ls.key, "link", ls.id, "from", string(from))
}

// holder decides whether a report from ls may speak for the run, claiming it
// when the report is itself the answer: an event or finish from the link an
// offer is out to accepts it; from the key now serving the agent, for a run
// no one holds, it is a late ack — claimed even when the key's bucket is
// full (the provider chose to run it; the place is counted), answered_late
// only when an offer to that key had lapsed; from the key that held the run
// before a takeover or a lost link, it re-adopts it (D7). It returns ""
// when ls holds the run, or the reason the report is refused.
func (l *lane) holder(ctx context.Context, ls *linkState) string {
	b := l.b
	if l.offer != nil && l.offer.link == ls {
		l.offer.timer.Stop()
		l.offer = nil
		b.metrics.offers.WithLabelValues("accepted").Inc()
		l.claim(ctx, ls, run.Offering, false) // the report in hand comes first
		return ""
	}
	b.mu.Lock()
	switch {
	case l.claimedBy == ls:
		b.mu.Unlock()
		return ""
	case l.claimedBy != nil && l.claimedBy.key == ls.key && (l.claimedBy.replaced || b.links[l.claimedBy.link] != l.claimedBy):
		// The link holding it was replaced by this newer link of the key
		// (or is gone and its loss not yet read): the key carries on here.
		old := l.claimedBy
		l.claimedBy, l.offeredTo = ls, ls // same key: the place stays taken
		b.mu.Unlock()
		l.log.InfoContext(ctx, "run passed to the newer link of its key", "provider_key", ls.key, "from", old.id, "link", ls.id)
		return ""
	case l.claimedBy != nil:
		b.mu.Unlock()
		l.log.WarnContext(ctx, "report from a link that does not hold the run; refused", "provider_key", ls.key, "link", ls.id)
		return l.strangerSafe(ls, refusedOtherLink)
	case l.orphan && ls.key == l.adoptKey:
		l.orphan = false
		l.claimedBy, l.claimedAt, l.offeredTo = ls, b.clock.Now(), ls
		if l.reserved == "" {
			b.bucketFor(ls.key).inFlight++
		}
		l.reserved = "" // the kept place is the adopter's now
		b.leaveThreadLocked(l)
		epoch := b.epoch
		b.mu.Unlock()
		if l.orphanT != nil {
			l.orphanT.Stop()
		}
		err := b.write(ctx, "adopt run", func() error { _, err := b.st.Adopt(ctx, epoch, l.id); return err })
		if err != nil {
			l.log.ErrorContext(ctx, "could not re-adopt run", "err", err)
			return refusedEnded
		}
		l.log.InfoContext(ctx, "run re-adopted by its provider", "provider_key", ls.key, "link", ls.id)
		if l.cancelRequested {
			l.sendCancel(ctx)
		}
		return ""
	case !l.orphan && l.offeredTo == nil && b.served[l.agent] != nil && b.served[l.agent].key == ls.key:
		b.bucketFor(ls.key).inFlight++
		l.offeredTo = ls
		b.mu.Unlock()
		late := l.gaveUpOn == ls.key
		if late {
			l.log.WarnContext(ctx, "late ack: the provider reported for a run whose offer had lapsed", "provider_key", ls.key)
		} else {
			l.log.InfoContext(ctx, "the provider reported for a queued run it was not offered: claimed", "provider_key", ls.key)
		}
		l.claim(ctx, ls, run.Queued, false)
		if late {
			b.count(ctx, ls.key, store.AnsweredLate)
		}
		return ""
	}
	b.mu.Unlock()
	l.log.WarnContext(ctx, "report for a run nobody holds; refused", "provider_key", ls.key, "link", ls.id)
	return refusedUnknown
}

// ---- relaying ----

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
	b.mu.Lock()
	epoch := b.epoch
	b.mu.Unlock()
	var seqs []int
	t0 := time.Now() // real time, for the metric: this waits on PostgreSQL
	// One key for every attempt: a retry of an attempt that committed
	// before its answer was lost stores nothing twice (D13).
	key := store.NewWriteKey()
	err := b.write(ctx, "append events", func() (err error) {
		seqs, err = b.st.AppendProviderEventsOnce(ctx, epoch, l.id, key, evs)
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

// ---- ending ----

// settle is the finish funnel, first match wins: an interrupt outcome
// pauses (input-required); RUN_FINISHED completes; a requested cancel
// cancels; anything else fails.
func (l *lane) settle(ctx context.Context) { l.settleEvents(ctx, nil, false) }

// settleEvents is settle with the provider's last events (validated and
// noted) stored first, in the same transaction; with claim, the claim
// that starts the round is written first in it too.
func (l *lane) settleEvents(ctx context.Context, evs []store.NewEvent, claim bool) {
	c := store.Conclusion{ProviderEvents: evs, Claim: claim}
	switch {
	case l.interrupts != nil:
		interrupt, _ := json.Marshal(map[string]json.RawMessage{"interrupts": l.interrupts})
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
		c.Move = store.Move{To: run.Failed, Reason: run.Reason(reason)}
	default:
		c.Move = store.Move{To: run.Failed, Reason: run.ReasonStreamEndedWithoutFinishing}
		c.Events = []json.RawMessage{agui.RunError(run.StreamEndedMessage, string(run.ReasonStreamEndedWithoutFinishing))}
	}
	l.conclude(ctx, c)
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
// A run whose terminal event is stored has said how it ends: it settles by
// the finish funnel instead, nothing is stored after that event, and nothing
// is counted (D15) — on every path that would fail it (link loss, grace,
// takeover, the sweep).
func (l *lane) fail(ctx context.Context, reason run.Reason, countAbandoned bool) bool {
	if l.offer != nil {
		l.offer.timer.Stop()
		l.offer = nil
	}
	if l.reportedEnd() {
		l.log.InfoContext(ctx, "run reported its end before it would fail; settled from what is stored", "reason", string(reason))
		l.settle(ctx)
		return true
	}
	c := store.Conclusion{Move: store.Move{To: run.Failed, Reason: reason}}
	if !l.sawError {
		c.Events = []json.RawMessage{agui.RunError(run.Sentence(reason), string(reason))}
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
	ok := l.conclude(ctx, c)
	if ok && abandonedBy != "" {
		b.count(ctx, abandonedBy, store.Abandoned)
	}
	return ok
}

// conclude writes the run's end and forgets it. A refused write (the run was
// not where the lane thought) still forgets it: the record is the truth.
func (l *lane) conclude(ctx context.Context, c store.Conclusion) bool {
	b := l.b
	b.mu.Lock()
	epoch := b.epoch
	b.mu.Unlock()
	c.Move.RunID, c.Move.Writer, c.Move.Epoch = l.id, run.ByBroker, epoch
	// One key for every attempt: a retry of an attempt that committed
	// before its answer was lost stores nothing twice (D13).
	c.WriteKey = store.NewWriteKey()
	var r store.Run
	var appended []store.Appended
	err := b.write(ctx, "conclude run", func() (err error) {
		r, appended, err = b.st.Conclude(ctx, c)
		return err
	})
	if ctx.Err() != nil {
		return false // leadership ended mid-write: the next leader settles it
	}
	if err != nil {
		l.log.ErrorContext(ctx, "run's end was refused", "to", string(c.Move.To), "err", err)
		if len(c.ProviderEvents) > 0 && !c.Claim && errors.Is(err, store.ErrIllegalTransition) {
			// The end was refused, not the events carried with it: store
			// them as relay would have.
			l.storeAlone(ctx, epoch, c.ProviderEvents)
		}
	} else {
		pub := make([]livefeed.Published, len(appended))
		for i, a := range appended {
			pub[i] = livefeed.Published{Seq: a.Seq, Event: a.Event}
		}
		l.publishBatch(ctx, pub)
		if b.feed != nil {
			if err := b.feed.End(ctx, l.id, r.LastSeq, string(r.Status)); err != nil {
				l.log.WarnContext(ctx, "live feed end failed", "err", err)
			}
		}
		// A terminal move dropped the KYOK binding in the same transaction.
		b.mu.Lock()
		l.status, l.roundQueuedAt = r.Status, r.QueuedAt
		b.mu.Unlock()
		b.metrics.ended.WithLabelValues(string(r.Status)).Inc()
		l.log.InfoContext(ctx, "run ended", "status", string(r.Status), "reason", r.FailureReason)
	}
	b.forget(l)
	return err == nil
}

// storeAlone stores events that were to ride with a refused conclude, and
// publishes them.
func (l *lane) storeAlone(ctx context.Context, epoch int64, evs []store.NewEvent) {
	var seqs []int
	key := store.NewWriteKey()
	err := l.b.write(ctx, "append events", func() (err error) {
		seqs, err = l.b.st.AppendProviderEventsOnce(ctx, epoch, l.id, key, evs)
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			l.log.ErrorContext(ctx, "could not store events", "events", len(evs), "err", err)
		}
		return
	}
	pub := make([]livefeed.Published, 0, len(evs))
	for i, seq := range seqs {
		if seq > 0 {
			pub = append(pub, livefeed.Published{Seq: seq, Event: evs[i].Event})
		}
	}
	l.publishBatch(ctx, pub)
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
	switch {
	case l.status.Terminal():
		b.ended.add(l.id)
	case l.status == run.InputRequired && !l.roundQueuedAt.IsZero():
		b.ended.paused(l.id, l.roundQueuedAt)
	}
	b.leaveThreadLocked(l)
	key := l.reserved
	if l.offeredTo != nil {
		key = l.offeredTo.key
	}
	if key != "" {
		b.bucketFor(key).release()
		l.offeredTo, l.reserved = nil, ""
		// A freed place is news to every head waiting for that key.
		b.nudgeHeadsOfKeyLocked(key)
		b.wakeSweep()
	}
}

// addLaneLocked registers a lane, and an interjection under the run it
// addresses (a claim then nudges only those, not every lane). Caller holds
// b.mu.
func (b *Broker) addLaneLocked(l *lane) {
	b.lanes[l.id] = l
	if l.addressed != "" {
		b.addressing[l.addressed] = append(b.addressing[l.addressed], l)
	}
}

// unaddressLocked drops a forgotten interjection from addressing. Caller
// holds b.mu.
func (b *Broker) unaddressLocked(l *lane) {
	if l.addressed == "" {
		return
	}
	ls := slices.DeleteFunc(b.addressing[l.addressed], func(x *lane) bool { return x == l })
	if len(ls) == 0 {
		delete(b.addressing, l.addressed)
	} else {
		b.addressing[l.addressed] = ls
	}
}

// leaveThreadLocked takes l out of its thread's queue and nudges the new head.
func (b *Broker) leaveThreadLocked(l *lane) {
	dq := b.threads[l.threadID]
	for i, x := range dq {
		if x == l {
			dq = append(dq[:i:i], dq[i+1:]...)
			break
		}
	}
	if len(dq) == 0 {
		delete(b.threads, l.threadID)
		return
	}
	b.threads[l.threadID] = dq
	b.nudgeLocked(dq[0])
}

// joinThreadLocked puts l into its thread's queue in arrival order.
func (b *Broker) joinThreadLocked(l *lane, arrival time.Time) {
	dq := b.threads[l.threadID]
	i := sort.Search(len(dq), func(i int) bool { return dq[i].queuedAt.After(arrival) })
	dq = append(dq, nil)
	copy(dq[i+1:], dq[i:])
	dq[i] = l
	b.threads[l.threadID] = dq
}

// ---- cancel, loss, clocks ----

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
		l.conclude(ctx, store.Conclusion{Move: store.Move{To: run.Cancelled}})
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
		l.claimedBy, l.orphan, l.adoptKey, l.linkLost = nil, true, ls.key, true
		if l.offeredTo != nil {
			l.reserved = l.offeredTo.key
			l.offeredTo = nil
		}
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
