package door

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// A run's events as a door serves them (D9): the stored backlog from
// PostgreSQL, then the Redis live tail, each event once and in seq order,
// from any door instance. Tail is the loop without any wire: the door says
// what to do with each event (Relay) and with idle time (Idle).

// TailOptions pace a Tail. Zero durations take the defaults below.
type TailOptions struct {
	Store *store.Store
	Feed  *livefeed.Feed // nil: poll PostgreSQL alone
	Log   *slog.Logger
	// LiveBlock is the longest single wait on the live feed.
	LiveBlock time.Duration
	// PollInterval paces PostgreSQL polling when the feed is absent, failing
	// or showed a stale end marker.
	PollInterval time.Duration
	// DBCheck is how often a feed-fed tail re-reads PostgreSQL anyway.
	DBCheck time.Duration
	// Heartbeat is the idle interval after which Idle is called.
	Heartbeat time.Duration
	// SettleWait bounds Settle.
	SettleWait time.Duration
	// GiveUp is how long a tail that cannot go on without the record
	// keeps trying to read it before it ends with TailStorage.
	GiveUp time.Duration
}

// Defaults of TailOptions.
const (
	DefaultLiveBlock    = 2 * time.Second
	DefaultPollInterval = 250 * time.Millisecond
	DefaultDBCheck      = 5 * time.Second
	DefaultHeartbeat    = 15 * time.Second
	DefaultSettleWait   = 5 * time.Second
	tailFeedRetry       = 5 * time.Second
	// StorageGiveUp (TailOptions.GiveUp's default) is how long a stream
	// waits on a record it cannot go on without, from the start of the
	// first read that failed: the budget of a request's own look-ups (two
	// storage bounds), so a hung read is tried twice and a refused one a
	// dozen times (D13 "fail fast"; design.md §Doors under storage faults).
	StorageGiveUp   = 2 * StorageTimeout
	tailBacklogPage = 500
)

func (o TailOptions) withDefaults() TailOptions {
	if o.LiveBlock <= 0 {
		o.LiveBlock = DefaultLiveBlock
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.DBCheck <= 0 {
		o.DBCheck = DefaultDBCheck
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.SettleWait <= 0 {
		o.SettleWait = DefaultSettleWait
	}
	if o.GiveUp <= 0 {
		o.GiveUp = StorageGiveUp
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// TailEnd says why Tail.Run returned.
type TailEnd int

const (
	// TailSettled: the run ended or paused and every stored event was relayed.
	TailSettled TailEnd = iota + 1
	// TailStopped: Relay asked to stop (a terminal event, typically).
	TailStopped
	// TailBudget: the end time passed first.
	TailBudget
	// TailGone: the context ended or the client went (Gone said so).
	TailGone
	// TailUnknown: the run is no longer stored: retention deleted it
	// while it was being read (FUNDUQ_RETENTION, broker-node prune). The
	// stream ends saying so, as a request after the prune is told the run
	// is unknown (design.md §The doors), rather than wait on a record
	// that will never settle.
	TailUnknown
	// TailStorage: the tail cannot go on without the record — it has
	// neither read it nor relayed anything from its feed yet, or only the record can
	// carry it (no feed, a failing feed, a gap, a stale end) — and the
	// record stayed out of reach for GiveUp with nothing relayed
	// meanwhile. The stream ends typed, naming After to resume from,
	// rather than retry until its budget (the Lambda deadline) with
	// keep-alives alone (design.md §Doors under storage faults).
	TailStorage
)

// Tail follows one run's events after seq After.
type Tail struct {
	O     TailOptions
	RunID string
	After int // the last seq relayed; advanced by Run

	// ThreadID and ProviderKey are the run's, for the tail's log lines,
	// which name a run by all three (design.md §Logs); empty: left out.
	ThreadID, ProviderKey string

	// Relay handles one event; returning true stops the tail.
	Relay func(seq int, ev json.RawMessage) (stop bool)
	// Idle is called when Heartbeat passed since the last Relay or Idle.
	Idle func()
	// Gone reports the client is gone (a write failed); nil: never.
	Gone func() bool
	// Flush, when set, is called before each wait on the feed or a poll:
	// a door that buffers its writes sends what the pass before relayed
	// in one flush per batch, not one per event.
	Flush func()
	// Fresh: the request following the run just wrote it (store.Admitted.
	// Created). Its first look is then at the live feed, not PostgreSQL:
	// nothing can be relayed from the feed before it is stored (D9), the
	// feed keeps a run's entries from seq 1, and an entry past the next
	// seq (a gap, a trimmed start) or a failing feed sends the tail to
	// PostgreSQL as it would any tail. A run that never reaches the feed
	// is read from PostgreSQL at the first DBCheck.
	Fresh bool

	lastActive time.Time
	ended      bool
	marker     livefeed.Entry // the end marker read with the terminal event (Marker)
}

// Ended reports that when Run returned the tail knew the run's end (or
// pause) to be recorded: the status read with the events said so, or the
// end marker of the round whose terminal event stopped the tail came in
// the same feed read (the broker publishes it after the end's commit).
func (t *Tail) Ended() bool { return t.ended }

// Marker is the round's end marker when it came in the same feed read as
// the terminal event that stopped the tail (then Ended reports true too).
func (t *Tail) Marker() (livefeed.Entry, bool) { return t.marker, t.marker.End != "" }

// EndFollows reports whether rest, the feed entries read after the
// terminal event at seq, holds that round's end marker.
func EndFollows(rest []livefeed.Entry, seq int) bool {
	_, ok := endOf(rest, seq)
	return ok
}

// endOf is the end marker among rest of the round whose terminal event is
// at seq.
func endOf(rest []livefeed.Entry, seq int) (livefeed.Entry, bool) {
	for _, e := range rest {
		if e.End != "" && e.Seq == seq {
			return e, true
		}
	}
	return livefeed.Entry{}, false
}

func (t *Tail) gone() bool { return t.Gone != nil && t.Gone() }

// Settled reports a status a stream ends on: terminal, or paused on a question.
func Settled(s run.Status) bool { return s.Terminal() || s == run.InputRequired }

// Run relays events until the run settles with everything relayed, Relay
// stops it, end passes (zero: no end), or ctx ends.
func (t *Tail) Run(ctx context.Context, end time.Time) TailEnd {
	t.O = t.O.withDefaults()
	o := t.O
	log := o.Log.With("run_id", t.RunID)
	if t.ThreadID != "" {
		log = log.With("thread_id", t.ThreadID)
	}
	if t.ProviderKey != "" {
		log = log.With("provider_key", t.ProviderKey)
	}
	t.lastActive = time.Now()
	checkDB := !t.Fresh || o.Feed == nil
	staleEndAt := -1
	gapAt := -1 // the feed skipped past this seq: only the record can go on
	var nextDBCheck, feedDownUntil time.Time
	if !checkDB {
		nextDBCheck = t.lastActive.Add(o.DBCheck)
	}
	// read: the record was read (or, Fresh, just written by this
	// request), or the feed relayed an event, in this Run. stuckSince: when the first of the failed reads of the
	// record since the tail last relayed or read it began; zero while it
	// reads.
	read := t.Fresh
	var stuckSince time.Time
	for progress := t.After; ; {
		if ctx.Err() != nil || t.gone() {
			return TailGone
		}
		if t.After != progress {
			// Relayed: the record, or the feed in seq order, carries the
			// stream, which goes on as one that read the record.
			progress, stuckSince, read = t.After, time.Time{}, true
		}
		if t.Flush != nil {
			if t.Flush(); t.gone() {
				return TailGone
			}
		}
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			return TailBudget
		}
		if checkDB || !now.Before(nextDBCheck) {
			res, err := t.fromDB(ctx)
			if res != 0 {
				return res
			}
			checkDB = false
			nextDBCheck = now.Add(o.DBCheck)
			if err == nil {
				read, stuckSince = true, time.Time{}
			} else if stuckSince.IsZero() {
				stuckSince = now
			}
			if err != nil {
				if ctx.Err() != nil {
					return TailGone
				}
				log.WarnContext(ctx, "tail: reading stored events failed", "err", err)
				recordOnly := o.Feed == nil || now.Before(feedDownUntil) || gapAt == t.After || staleEndAt == t.After
				if (recordOnly || !read) && !stuckSince.IsZero() && time.Since(stuckSince) >= o.GiveUp {
					log.WarnContext(ctx, "tail: the record stayed out of reach; ending the stream", "after", t.After)
					return TailStorage
				}
				if recordOnly {
					checkDB = true
				} else if !read {
					// Not read yet: what the feed holds is relayed
					// meanwhile, and the record tried again at the
					// polling pace, so a stream that must read it gives
					// up within GiveUp, not a DBCheck later.
					nextDBCheck = time.Now().Add(o.PollInterval)
				} else {
					// The record is out of reach for this door, not for
					// the broker: what the feed holds is stored (D9), so
					// the tail goes on relaying it and reads the record
					// again at its usual pace (DBCheck), rather than stall
					// until its storage is back (design.md §Doors under
					// storage faults).
					nextDBCheck = time.Now().Add(o.DBCheck)
				}
			}
		}
		wait := min(o.LiveBlock, time.Until(t.lastActive.Add(o.Heartbeat)))
		if !end.IsZero() {
			wait = min(wait, time.Until(end))
		}
		if !read {
			wait = min(wait, time.Until(nextDBCheck))
		}
		wait = max(wait, time.Millisecond)
		useFeed := o.Feed != nil && !time.Now().Before(feedDownUntil) && staleEndAt != t.After && !checkDB
		if useFeed {
			entries, err := o.Feed.Read(ctx, t.RunID, t.After, wait)
			if err != nil {
				if ctx.Err() != nil {
					return TailGone
				}
				log.WarnContext(ctx, "tail: live feed failed; polling PostgreSQL", "err", err)
				feedDownUntil = time.Now().Add(tailFeedRetry)
				checkDB = true
				continue
			}
			for i, e := range entries {
				if e.End != "" {
					// The record says whether this ends the run or an
					// earlier round; until a newer event arrives, poll.
					staleEndAt, checkDB = t.After, true
					break
				}
				if e.Seq <= t.After {
					continue
				}
				if e.Seq != t.After+1 {
					gapAt, checkDB = t.After, true // a gap: the record fills it
					break
				}
				if t.relay(e.Seq, e.Event) {
					t.marker, t.ended = endOf(entries[i+1:], e.Seq)
					return TailStopped
				}
			}
		} else {
			Sleep(ctx, min(o.PollInterval, wait))
			checkDB = true
		}
		if t.Idle != nil && time.Since(t.lastActive) >= o.Heartbeat {
			t.Idle()
			t.lastActive = time.Now()
		}
	}
}

func (t *Tail) relay(seq int, ev json.RawMessage) bool {
	t.After = seq
	t.lastActive = time.Now()
	if t.Relay == nil {
		return false
	}
	return t.Relay(seq, ev)
}

// fromDB relays the stored events after t.After; non-zero when the tail is
// done.
func (t *Tail) fromDB(ctx context.Context) (TailEnd, error) {
	end := TailEnd(0)
	cur, err := ReadRecord(ctx, t.O.Store, t.RunID, t.After, tailBacklogPage, func(seq int, ev json.RawMessage) bool {
		switch {
		case t.relay(seq, ev):
			end = TailStopped
		case t.gone():
			end = TailGone
		}
		return end != 0
	})
	if errors.Is(err, store.ErrNotFound) {
		return TailUnknown, nil
	}
	if err != nil {
		return end, err
	}
	t.ended = Settled(cur.Status) // read after the events: their round has ended
	if end != 0 {
		return end, nil
	}
	if t.ended && t.After >= cur.LastSeq {
		return TailSettled, nil
	}
	return 0, nil
}

// ReadRecord hands relay a run's stored events after seq after, in order,
// page by page, until relay returns true (stop: a terminal event, a client
// gone), and returns the run as read after them — so a settled run whose
// status it returns has every event among those read, unless relay
// stopped. The first page and the status are one round trip.
func ReadRecord(ctx context.Context, st *store.Store, runID string, after, page int, relay func(seq int, ev json.RawMessage) (stop bool)) (store.Run, error) {
	var cur store.Run
	full := false // a full page was read: the status read with it may predate later pages
	for first := true; ; first = false {
		dctx, cancel := Step(ctx)
		var evs []store.Event
		var err error
		if first {
			evs, cur, err = st.EventsAndRun(dctx, runID, after, page)
		} else {
			evs, err = st.EventsAfter(dctx, runID, after, page)
		}
		cancel()
		if err != nil {
			return store.Run{}, err
		}
		for _, e := range evs {
			if e.Seq <= after {
				continue
			}
			after = e.Seq
			if relay(e.Seq, e.Event) {
				return cur, nil
			}
		}
		if len(evs) < page {
			break
		}
		full = true
	}
	if full {
		dctx, cancel := Step(ctx)
		defer cancel()
		r, err := st.GetRun(dctx, runID)
		if err != nil {
			return store.Run{}, err
		}
		cur = r
	}
	return cur, nil
}

// Settle waits, after a terminal event, until the broker has recorded the
// run's outcome or SettleWait passes, and returns the run as read last.
func (t *Tail) Settle(ctx context.Context) (store.Run, error) {
	t.O = t.O.withDefaults()
	o := t.O
	deadline := time.Now().Add(o.SettleWait)
	for {
		dctx, cancel := Step(ctx)
		cur, err := o.Store.GetRun(dctx, t.RunID)
		cancel()
		if err == nil && Settled(cur.Status) {
			return cur, nil
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return cur, err
		}
		WaitEnd(ctx, o.Feed, t.RunID, t.After, min(o.PollInterval, left))
	}
}

// AwaitEnd waits, after Run stopped on a terminal event, until the broker
// has recorded the run's end (or SettleWait passes), so a client whose
// stream ended reads a settled record: an answer to an interrupt it just
// saw finds the run input-required, the next turn finds the last one
// completed and its messages folded onto the thread. Unlike Settle it
// needs no record back: the end marker the broker publishes right after
// recording the end says so without a read (it usually comes with the
// terminal event or a moment after it, endWatch), and so does Ended.
//
// slow, when set, is called before each wait after the first read found
// the run unsettled: the end is slow to be recorded (the broker is busy or
// gone), so the caller sends what it relayed meanwhile and only its close
// waits. Usually the marker wakes the first wait and the events and the
// close go out together (a client that stops reading at the terminal
// event then still finds the stream ended, and its connection is reused).
func (t *Tail) AwaitEnd(ctx context.Context, slow func()) {
	t.O = t.O.withDefaults()
	o := t.O
	if t.ended || o.Feed != nil && WaitEnd(ctx, o.Feed, t.RunID, t.After, endWatch) {
		return
	}
	deadline := time.Now().Add(o.SettleWait)
	for waited := false; ctx.Err() == nil; waited = true {
		dctx, cancel := Step(ctx)
		cur, err := o.Store.GetRun(dctx, t.RunID)
		cancel()
		if err == nil && Settled(cur.Status) {
			return
		}
		if waited && slow != nil {
			slow()
		}
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		if WaitEnd(ctx, o.Feed, t.RunID, t.After, min(o.PollInterval, left)) {
			return
		}
	}
}

// endWatch is how long AwaitEnd looks for the end marker before it reads
// the record. A run's end and its last events are one commit, published
// events first and the marker next, so the marker trails the terminal
// event by a Redis round trip; when the terminal event was stored ahead of
// the end (the finish frame had not come), the record is read after this
// short a wait.
const endWatch = 10 * time.Millisecond

// WaitEnd waits up to d for the broker's end marker on a run's live feed
// (published right after the run's end is recorded) past seq after, so a
// door that has relayed the terminal event reads the settled record as soon
// as it exists instead of at its next poll. Without a feed, or when the
// feed has only other entries, it sleeps out d. It reports whether the
// marker came: after the round's terminal event at seq after, that says
// the run's end is recorded.
func WaitEnd(ctx context.Context, feed *livefeed.Feed, runID string, after int, d time.Duration) bool {
	_, ok := WaitMarker(ctx, feed, runID, after, d)
	return ok
}

// WaitMarker is WaitEnd returning the marker that came: the first one past
// seq after.
func WaitMarker(ctx context.Context, feed *livefeed.Feed, runID string, after int, d time.Duration) (livefeed.Entry, bool) {
	if feed != nil {
		start := time.Now()
		entries, err := feed.Read(ctx, runID, after, d)
		if err == nil {
			for _, e := range entries {
				if e.End != "" {
					return e, true
				}
			}
		}
		d -= time.Since(start)
	}
	Sleep(ctx, d)
	return livefeed.Entry{}, false
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}
