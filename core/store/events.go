package store

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is one stored run event.
type Event struct {
	RunID     string
	Seq       int
	Event     json.RawMessage
	CreatedAt time.Time
}

// AppendEvent stores one event of a run under the broker's epoch and returns
// its seq (1, 2, 3… per run). It is durable before the caller publishes it
// anywhere (D9). The run must exist; a stale epoch changes nothing.
func (s *Store) AppendEvent(ctx context.Context, epoch int64, runID string, event json.RawMessage) (int, error) {
	return s.AppendProviderEvent(ctx, epoch, runID, event, nil)
}

// ErrDuplicateEvent: an event with this provider seq is already stored for
// the run (a resend after a reconnect, D7); nothing was stored.
var ErrDuplicateEvent = errors.New("event already stored")

// AppendProviderEvent is AppendEvent with the provider's own optional seq,
// stored so a resent event is recognised (ErrDuplicateEvent).
func (s *Store) AppendProviderEvent(ctx context.Context, epoch int64, runID string, event json.RawMessage, providerSeq *int64) (int, error) {
	seqs, err := s.AppendProviderEvents(ctx, epoch, runID, []NewEvent{{Event: event, ProviderSeq: providerSeq}})
	if err != nil {
		return 0, err
	}
	switch seqs[0] {
	case 0:
		return 0, fmt.Errorf("append event to run %s: provider seq %d: %w", runID, *providerSeq, ErrDuplicateEvent)
	case SeqTaken:
		return 0, fmt.Errorf("append event to run %s: provider seq %d: %w", runID, *providerSeq, ErrSeqTaken)
	}
	return seqs[0], nil
}

// NewEvent is one provider event to append: the event and the provider's
// own optional seq.
type NewEvent struct {
	Event       json.RawMessage
	ProviderSeq *int64
}

// SeqTaken is the seq AppendProviderEvents returns for an event whose
// provider seq this round already stored with another event (or that an
// earlier event of the batch carries): no resend, but nothing is stored for
// it, and its provider is told (design.md D7, D15).
const SeqTaken = -1

// ErrSeqTaken refuses a Conclusion (not a claim's: its round has nothing
// stored) whose provider events hold one under a provider seq already taken
// by another event (SeqTaken): store them alone with AppendProviderEvents,
// which answers for each, and conclude without them.
var ErrSeqTaken = errors.New("an event's provider seq is taken by another event this round")

// AppendProviderEvents stores evs, in order, in one transaction under the
// broker's epoch: one fence, one dedupe query, one multi-row insert however
// many events there are, pipelined in two round trips. It returns, per
// event, the seq it was stored under, 0 for an event whose provider seq is
// already stored in this round with the same event (a resend; nothing stored
// for it), or SeqTaken for another event under such a seq. Every
// returned event is durable before the call returns (D9). A stale epoch
// changes nothing; the run must exist.
func (s *Store) AppendProviderEvents(ctx context.Context, epoch int64, runID string, evs []NewEvent) ([]int, error) {
	return s.AppendProviderEventsOnce(ctx, epoch, runID, "", evs)
}

// AppendProviderEventsOnce is AppendProviderEvents made safe to repeat
// with key (NewWriteKey, one per logical write): the run records the key
// of the write that stored its events, so a repeat of a write that
// committed before its answer was lost (a connection dropped after COMMIT)
// stores nothing again and returns the seqs the first attempt gave — also
// for events without a provider seq, which dedupe cannot recognise. ""
// records no key.
func (s *Store) AppendProviderEventsOnce(ctx context.Context, epoch int64, runID, key string, evs []NewEvent) ([]int, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	if err := s.faults.Load().refuseEvents(evs); err != nil {
		return nil, fmt.Errorf("append events to run %s (injected): %w", runID, err)
	}
	var rd eventsRead
	var seqs []int
	err := s.pipelined(ctx, "append events to run "+runID,
		func(b *pgx.Batch) {
			rd = eventsRead{}
			rd.queueLock(b, runID)
			rd.queueDedupe(b, runID, evs)
		},
		func() error {
			if err := rd.check(epoch); err != nil {
				return err
			}
			if rd.wrote(key) {
				seqs = rd.writeSeqs
				return errWritten
			}
			seqs = nil
			return nil
		},
		func(b *pgx.Batch) {
			ins := eventInsert{last: rd.lastSeq}
			seqs = ins.add(rd, evs)
			if !ins.queue(b, runID) {
				return
			}
			if key == "" {
				b.Queue(`UPDATE runs SET last_seq = $2, last_activity_at = now() WHERE run_id = $1`, runID, ins.last)
				return
			}
			b.Queue(`UPDATE runs SET last_seq = $2, last_activity_at = now(), write_key = $3, write_seqs = $4 WHERE run_id = $1`,
				runID, ins.last, key, int32s(seqs))
		})
	if err != nil && !errors.Is(err, errWritten) {
		return nil, err
	}
	return seqs, nil
}

// errWritten: the write's key is the run's last: an earlier attempt of it
// committed. Rolled back, and answered with that attempt's result.
var errWritten = errors.New("written already by an earlier attempt of this write")

// NewWriteKey returns a fresh key for one logical write (see
// AppendProviderEventsOnce): made once, outside the write's retries.
func NewWriteKey() string {
	var b [12]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func int32s(xs []int) []int32 {
	out := make([]int32, len(xs))
	for i, x := range xs {
		out[i] = int32(x)
	}
	return out
}

// wrote reports whether key is the key of the run's last event write.
func (rd *eventsRead) wrote(key string) bool { return key != "" && rd.writeKey == key }

// eventsRead is what the first round trip of an event write reads: the
// leader epoch (locked FOR SHARE, the fence), the run's row (locked FOR
// UPDATE: its last_seq is ours until commit) and the provider seqs of the
// batch already stored this round.
type eventsRead struct {
	current  int64
	found    bool
	status   string
	threadID string
	lastSeq  int
	stored   map[int64]string // provider seq → the event stored under it this round
	// writeKey and writeSeqs are the run's last keyed event write: its key
	// and the seqs it gave.
	writeKey  string
	writeSeqs []int
	// cancelRequested: the row holds a cancel request (read under the
	// lock, so a request commits wholly before or after the write).
	cancelRequested bool
}

// queueLock reads the leader epoch (FOR SHARE: the fence) and the run's
// row (FOR UPDATE) in one statement. A missing run leaves found false;
// the epoch is then read alone, so a stale writer still learns it is.
func (rd *eventsRead) queueLock(b *pgx.Batch, runID string) {
	b.Queue(`WITH l AS (`+fenceSQL+`),
		r AS (SELECT status, thread_id, last_seq, write_key, write_seqs, cancel_requested_by IS NOT NULL AS cancel_requested
			FROM runs WHERE run_id = $1 FOR UPDATE)
		SELECT l.epoch, r.status, r.thread_id, r.last_seq, r.write_key, r.write_seqs, r.cancel_requested FROM l LEFT JOIN r ON true`, runID).QueryRow(func(row pgx.Row) error {
		var status, threadID, writeKey *string
		var last *int
		var writeSeqs []int32
		var cancelRequested *bool
		if err := row.Scan(&rd.current, &status, &threadID, &last, &writeKey, &writeSeqs, &cancelRequested); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		if status != nil {
			rd.found, rd.status, rd.threadID, rd.lastSeq = true, *status, *threadID, *last
			rd.cancelRequested = cancelRequested != nil && *cancelRequested
		}
		if writeKey != nil {
			rd.writeKey = *writeKey
			rd.writeSeqs = make([]int, len(writeSeqs))
			for i, x := range writeSeqs {
				rd.writeSeqs[i] = int(x)
			}
		}
		return nil
	})
}

// queueDedupe reads which provider seqs of evs this round already stored.
// One index probe of (run_id, provider_seq) per seq: the LATERAL … LIMIT 1
// keeps the planner from scanning the run's events instead (a filter over
// every event stored this round, which grew with the run: ~100 ms per
// 700-event batch at 20,000 events, where the probes take ~1 ms).
func (rd *eventsRead) queueDedupe(b *pgx.Batch, runID string, evs []NewEvent) {
	var pseqs []int64
	for _, e := range evs {
		if e.ProviderSeq != nil {
			pseqs = append(pseqs, *e.ProviderSeq)
		}
	}
	if len(pseqs) == 0 {
		return
	}
	// The event's text as sent (a json column keeps it), to tell a resend
	// from another event under the same seq (SameEvent).
	b.Queue(`SELECT p.s, hit.ev FROM runs r, unnest($2::bigint[]) AS p(s),
		LATERAL (SELECT e.event::text AS ev FROM run_events e WHERE e.run_id = r.run_id AND e.provider_seq = p.s AND e.seq > r.round_seq LIMIT 1) AS hit
		WHERE r.run_id = $1`, runID, pseqs).Query(func(rows pgx.Rows) error {
		rd.stored = map[int64]string{}
		var p int64
		var ev string
		_, err := pgx.ForEachRow(rows, []any{&p, &ev}, func() error {
			rd.stored[p] = ev
			return nil
		})
		return err
	})
}

// check is the fence's verdict and the run's existence.
func (rd *eventsRead) check(epoch int64) error {
	if err := fenced(epoch, rd.current); err != nil {
		return err
	}
	if !rd.found {
		return ErrNotFound
	}
	return nil
}

// eventInsert numbers events after the run's last seq (start it at
// eventsRead.lastSeq) and stores them in one multi-row insert.
type eventInsert struct {
	last  int
	nums  []int32
	texts []string
	ps    []*int64
	seen  map[int64]string
}

// add numbers the provider events of evs that are not resends (stored this
// round, or repeated within evs) and returns their seqs, 0 for a resend and
// SeqTaken for another event under a seq taken so.
func (ins *eventInsert) add(rd eventsRead, evs []NewEvent) []int {
	seqs := make([]int, len(evs))
	for i, e := range evs {
		if p := e.ProviderSeq; p != nil {
			held, ok := rd.stored[*p]
			if !ok {
				held, ok = ins.seen[*p] // a repeat within the batch is a resend too
			}
			if ok {
				// The same value written otherwise is a resend too (a
				// restarted process, another JSON writer): read only on
				// such a collision (SameEvent, design.md D7).
				if held != string(e.Event) && !SameEvent([]byte(held), e.Event) {
					seqs[i] = SeqTaken
				}
				continue
			}
			if ins.seen == nil {
				ins.seen = map[int64]string{}
			}
			ins.seen[*p] = string(e.Event)
		}
		seqs[i] = ins.push(e.Event, e.ProviderSeq)
	}
	return seqs
}

// taken reports whether add would give an event of evs SeqTaken.
func (rd eventsRead) taken(evs []NewEvent) bool {
	ins := eventInsert{}
	for _, s := range ins.add(rd, evs) {
		if s == SeqTaken {
			return true
		}
	}
	return false
}

// push numbers one event and returns its seq.
func (ins *eventInsert) push(ev json.RawMessage, pseq *int64) int {
	ins.last++
	ins.nums = append(ins.nums, int32(ins.last))
	ins.texts = append(ins.texts, string(ev))
	ins.ps = append(ins.ps, pseq)
	return ins.last
}

// queue adds the insert to b; it reports whether there was anything to
// insert (ins.last is then the run's new last_seq).
func (ins *eventInsert) queue(b *pgx.Batch, runID string) bool {
	if len(ins.nums) == 0 {
		return false
	}
	b.Queue(`INSERT INTO run_events (run_id, seq, event, provider_seq)
		SELECT $1, s, e::json, p FROM unnest($2::int[], $3::text[], $4::bigint[]) AS t(s, e, p)`,
		runID, ins.nums, ins.texts, ins.ps)
	return true
}

// EventsAndRun is EventsAfter and then GetRun, in one round trip: a
// stream's check of the record (every event after its position, then
// whether the run has settled — read in that order, so a settled run's
// events are all among them when the page is not full).
func (s *Store) EventsAndRun(ctx context.Context, runID string, after, limit int) ([]Event, Run, error) {
	var evs []Event
	var r Run
	b := &pgx.Batch{}
	b.Queue(eventsAfterSQL, runID, after, limit).Query(func(rows pgx.Rows) (err error) {
		evs, err = collectEvents(rows)
		return err
	})
	b.Queue(`SELECT `+runColumns+` FROM runs WHERE run_id = $1`, runID).QueryRow(func(row pgx.Row) (err error) {
		r, err = scanRun(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		return err
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, Run{}, fmt.Errorf("read events and status of run %s: %w", runID, err)
	}
	return evs, r, nil
}

const eventsAfterSQL = `SELECT run_id, seq, event, created_at FROM run_events
		WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`

func collectEvents(rows pgx.Rows) ([]Event, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var e Event
		var b []byte
		err := row.Scan(&e.RunID, &e.Seq, &b, &e.CreatedAt)
		e.Event = b
		return e, err
	})
}

// EventsAfter reads a run's events with seq > after, in order.
func (s *Store) EventsAfter(ctx context.Context, runID string, after, limit int) ([]Event, error) {
	rows, err := s.pool.Query(ctx, eventsAfterSQL, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read events of run %s: %w", runID, err)
	}
	return collectEvents(rows)
}
