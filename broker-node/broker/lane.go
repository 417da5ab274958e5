package broker

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/funduq/funduq-go/core/run"
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
	// (the row's addressed_run_id, store.Run.AddressedRunID); "" for an
	// ordinary turn.
	addressed string
	readBack  bool // taken at takeover from an earlier leader's rows
	// heldBack: held by an older epoch's provider and read back at
	// takeover (adoptLater), its round's stored events observed: a resend
	// of them is only known by the store, so events riding with the
	// finish are stored before the end is decided (relay).
	heldBack bool
	queuedAt time.Time // broker clock: when this round entered dispatch
	// roundQueuedAt is the round's queued_at as its row says (zero when
	// the lane came from a notice's payload, until its end is written):
	// what tells this round from the next one of the same run (ended.go).
	roundQueuedAt time.Time
	q             *queue
	log           *slog.Logger
	// epoch is the leadership the lane was born under (addLaneLocked): a
	// lane lives within one leadership (teardown stops every lane), so
	// every write it makes is fenced by this one epoch (D10).
	epoch int64

	// Guarded by b.mu: read by the roster, the sweep and take (a queued
	// run entering its lane).
	status          run.Status
	dispatchPending bool
	offeredTo       *linkState // a place is held on this link's key
	claimedBy       *linkState
	claimedAt       time.Time
	// passed: claimedBy got the run when the link holding it was
	// replaced, and has not reported for it since. The process running
	// it may be another than claimedBy's (a second process of the key
	// took the agent over), so a report from any link of the key takes
	// the run along (claimByReport, design.md D5).
	passed          bool
	noted           bool // abandoned or undelivered already counted for this run
	expirySent      bool
	graceWait       bool // waiting within provider_grace for a provider expected back
	cancelRequested bool
	endStored       bool   // the run's terminal event is stored (the sweep reads it)
	orphan          bool   // held by an older epoch, awaiting re-adoption (D7)
	adoptKey        string // the key that may re-adopt it
	// linkLost: the orphan's link was lost without a close frame; when
	// the link grace passes (from the loss, or from its key's re-attach,
	// onReattach) it fails provider_left_holding_it and counts abandoned
	// against adoptKey (D5).
	linkLost bool
	// reserved is the key whose bucket keeps a place for this orphan: its
	// provider is presumed still running it (a lost link, a takeover), so
	// a re-attached link of the key is not offered that place meanwhile —
	// it would decline, and a decline with room counts misdeclared. The
	// re-adoption takes the place over; forget gives it back.
	reserved string
	// reserveT ends the place a queued run keeps on its key after its
	// offer's link was lost (onGone): the link grace.
	reserveT clockwork.Timer
	// linkWait: queued while its agent's link was lost without a close
	// frame; it waits for the key until linkUntil (the link grace), then
	// fails agent_offline (the sweep), as a run does around a takeover.
	linkWait  bool
	linkUntil time.Time
	ended     bool

	// The lane goroutine's own.
	offer    *offerState
	offerSeq uint64
	deferred []command
	// parked holds reports read before their link registered, for a run
	// another live link of their key holds, until that changes (keep.go).
	parked *keptReports
	// keptOver is a link whose reports for this run went past the bound
	// on kept reports: they are refused as they come, none kept again.
	keptOver *linkState
	orphanT  clockwork.Timer
	// orphanGen numbers orphanT's timers: an orphanCmd of an earlier one
	// (replaced by a re-attach, onReattach) is stale.
	orphanGen uint64
	// graceEnd is when the link grace of the lost link the run is held
	// for ends: a re-attach must come before it (onReattach).
	graceEnd   time.Time
	sawFinish  bool
	sawError   bool
	errReason  string
	interrupts json.RawMessage
	events     []json.RawMessage // this round's events, for folding
	// eventAt maps a provider seq this lane stored this round to its
	// event's index in events: a resend of it reached after the run's
	// terminal event is taken, not refused (storedResend).
	eventAt map[int64]int
	// lastPSeq is the highest provider seq this round has seen stored:
	// math.MinInt64 before any, since the wire gives seq no origin and a
	// provider may number from 0 (or below). An event at or below it is
	// not counted towards the run's event limit (it may be a resend); the
	// store alone decides what is one (admit).
	lastPSeq int64
	// gaveUpOn is the key an offer of this run lapsed on: a report from it
	// afterwards is an answer funduq had stopped waiting for (answered_late).
	gaveUpOn string
	// cancelSent is the link the cancel frame went out on. It goes once
	// per link: asked again (a caller twice, a notice and the catch-up
	// both), the provider holding the run is sent nothing more; a link
	// that re-adopts the run is sent it anew.
	cancelSent *linkState
}

type offerState struct {
	id    uint64
	link  *linkState
	timer clockwork.Timer
	sent  time.Time // real time, to tell a broker that ran late (onLapse)
	// due is when its deliver_timeout passes, on the broker's clock: a
	// place kept on the link after another link of its key answered it
	// is kept until then at most (answeredBy, moved.go).
	due time.Time
	// rechecked: the lapse was put off once because the broker ran late.
	rechecked bool
	// stalls is how many backpressure waits of the link's read loop had
	// begun when the offer was sent (or its lapse last put off for one);
	// stalled, that one was going on then.
	stalls  uint64
	stalled bool
	// unwritten: the record still says queued (Settings.OfferingAfter
	// has not passed).
	unwritten bool
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
	if l.reserveT != nil {
		l.reserveT.Stop()
	}
}

func (l *lane) loop(ctx context.Context) {
	defer l.b.lanesWG.Done()
	defer l.drop(ctx)
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
// reports still waiting give their links' backlog back and are answered
// (the run has ended) — unless leadership ended first (refuseLive).
func (l *lane) drop(ctx context.Context) {
	l.b.mu.Lock()
	kept := l.unkeepLocked()
	l.b.mu.Unlock()
	for _, c := range append(append(kept, l.q.close()...), l.deferred...) {
		if l.isEnded() {
			l.refuseCmd(c, refusedEnded)
		} else {
			l.refuseLive(ctx, c, refusedEnded)
		}
	}
	l.deferred = nil
}

// refuseLive refuses a report the lane did not take, unless this node's
// leadership has ended meanwhile (a write failed with it): then the report
// is the next leader's to take, so it only gives its backlog place back.
// The link closes with "stopped leading; reconnect" right after the lanes
// stop, and the provider resends what it reported; a refusal would tell it
// the run is over (our SDK stops a running handler on one, ErrRunNotHeld,
// and stops resending a finished run's report) when the run has not ended.
func (l *lane) refuseLive(ctx context.Context, c command, why string) {
	if ctx.Err() == nil {
		l.refuseCmd(c, why)
		return
	}
	switch c := c.(type) {
	case eventCmd:
		c.link.release(c)
	case finishCmd:
		c.handled()
	}
}

func (l *lane) isEnded() bool {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.ended
}

// handle applies one command. While an offer is out, only its answer (or
// what stands for one) is read; the rest waits behind it, in order.
func (l *lane) handle(ctx context.Context, c command) {
	if l.offer != nil && !l.answers(c) {
		l.deferred = append(l.deferred, c)
		return
	}
	switch c := c.(type) {
	case tryCmd:
		l.try(ctx)
	case verdictCmd:
		if c.v == wire.Accepted && l.offer == nil && l.keep(c, c.link, c.offerable, c.reviewed) {
			break // an ack is a report: kept with those behind it (keep.go)
		}
		l.onVerdict(ctx, c)
	case lapseCmd:
		l.onLapse(ctx, c)
	case offeringDueCmd:
		l.onOfferingDue(ctx, c)
	case eventCmd:
		if l.keep(c, c.link, c.offerable, c.reviewed) {
			break // read again once its link registers (keep.go)
		}
		if why := l.claimByReport(ctx, c.link, c.registered, c.offerable); why != "" {
			l.refuseLive(ctx, c, why)
			break
		}
		if l.reportedEnd() {
			if l.storedResend(c) {
				c.link.release(c) // stored once already: taken (resend.go)
				break
			}
			l.refuseCmd(c, refusedAfterEnd)
			break
		}
		// What else the link sent meanwhile is stored with it, in one
		// transaction: the batch grows while PostgreSQL is slow. Not while
		// commands deferred behind an offer wait: they come first.
		batch := []eventCmd{c}
		var fin finishCmd
		finish := false
		if len(l.deferred) == 0 {
			batch = append(batch, l.q.takeEvents(c.link, maxEventBatch-1)...)
			// The run's end right behind its last events: both in one
			// transaction when that is safe.
			fin, finish = l.q.takeFinish(c.link)
		}
		l.onEvents(ctx, c.link, l.cutAfterEnd(batch), finish)
		fin.handled()
		l.b.heardOn(c.link.link, l.id) // taken: an answer from a link its offer moved from (moved.go)
	case finishCmd:
		if l.keep(c, c.link, c.offerable, c.reviewed) {
			break // read again once its link registers (keep.go)
		}
		if why := l.claimByReport(ctx, c.link, c.registered, c.offerable); why != "" {
			l.refuseLive(ctx, c, why)
		} else {
			l.endByFunnel(ctx)
			l.b.heardOn(c.link.link, l.id) // as for an event, above
		}
		c.handled()
	case keptCmd:
		// Their link registered or went: reviewKept, below.
	case cancelCmd:
		l.onCancel(ctx)
	case goneCmd:
		l.onGone(ctx, c)
	case replacedCmd:
		l.onReplaced(ctx, c)
	case failCmd:
		if l.verdictStands(c.reason) {
			l.fail(ctx, c.reason, false) // funduq's own verdict: nobody stopped serving
		}
	case expireCmd:
		l.onExpire(ctx)
	case orphanCmd:
		if c.gen == l.orphanGen {
			l.onOrphanTimeout(ctx)
		}
	case reattachCmd:
		l.onReattach(ctx, c)
	case unreserveCmd:
		l.onUnreserve()
	case storedEndCmd:
		if l.reportedEnd() {
			l.log.InfoContext(ctx, "run's terminal event is stored and its finish did not come: ending it")
			l.endByFunnel(ctx)
		}
	}
	// A verdict closes the offer: what waited behind it is read now, in
	// order, unless a new offer went out meanwhile.
	for l.offer == nil && len(l.deferred) > 0 && !l.isEnded() {
		next := l.deferred[0]
		l.deferred = l.deferred[1:]
		l.handle(ctx, next)
	}
	// Reports kept for their link's register are read again once what
	// kept them changed: the link registered or went, the run's holder
	// was replaced or went (keep.go).
	l.reviewKept(ctx)
}

// answers reports whether c speaks to the offer that is out.
func (l *lane) answers(c command) bool {
	switch c := c.(type) {
	case verdictCmd:
		// An ack read before its link registered answers no offer
		// (claimByReport): it waits with the reports behind it (keep.go).
		return c.link == l.offer.link || c.v != wire.Accepted || c.offerable
	case lapseCmd, offeringDueCmd:
		return true
	case eventCmd:
		return c.link == l.offer.link || l.keyAnswers(c.link, c.registered)
	case finishCmd:
		return c.link == l.offer.link || l.keyAnswers(c.link, c.registered)
	case goneCmd:
		return c.link == l.offer.link
	case replacedCmd:
		return c.link == l.offer.link
	}
	return false
}

// keyAnswers reports whether a report from ls answers the offer that is
// out though the offer went to another link: ls is a link of the offer's
// key serving agents of its own, and that key serves the run's agent. The key is the provider, and a
// report from the key serving the agent, for a run with an offer out to
// that key, claims it (design.md D15): a second process of the key that
// answers in time has answered, where waiting for the offered link's
// silence counted unanswered and then answered_late for one answer sent
// in time. registered is whether ls had registered agents when the report
// was read.
func (l *lane) keyAnswers(ls *linkState, registered bool) bool {
	o := l.offer
	if o == nil || ls == o.link || ls.key != o.link.key {
		return false
	}
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.served[l.agent]
	// A link that registered nothing is offered nothing, so it answers no
	// offer: what it reports is a resend of its key's earlier rounds
	// (design.md D7, §Open questions), read as ever. Its names as the
	// report was read, not as the lane reads it: a lane busy with a write
	// gets to a resend read before register only after the register.
	return s != nil && s.key == ls.key && !ls.withdrawn && registered && len(ls.names) > 0
}

// answeredBy moves the offer that is out to ls, a link of its key that
// answered it (keyAnswers): the key's place stays taken, and the run
// counts on ls's declaration. The offered link's own place stays taken
// until it answers the offer too or the offer's deliver_timeout passes
// (moved.go): its process may hold the run in a slot until it hears its
// answer refused.
func (l *lane) answeredBy(ctx context.Context, ls *linkState) {
	from := l.offer.link
	b := l.b
	b.mu.Lock()
	b.holdLocked(l, l.claimedBy, ls)
	b.keepMovedLocked(from, l.id, l.offer.due.Sub(b.clock.Now()))
	b.mu.Unlock()
	l.offer.link = ls
	l.log.InfoContext(ctx, "offer answered by another link of its key", append(l.keyAttr(ls.key), "offered", from.id, "link", ls.id)...)
}
