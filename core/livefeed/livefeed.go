// Package livefeed is the live fan-out of run events (D9): after the broker
// has stored an event in PostgreSQL it appends it to a Redis stream per run,
// and doors tail that stream after reading the stored backlog. The stream is
// a convenience for live readers, never the record: an event missing here is
// still in run_events, in order, under the same seq.
package livefeed

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/redisbound"
)

// Retention bounds what the feed keeps: the newest entries of a stream, for a
// while after its last write. Readers fall back to PostgreSQL for the rest.
const (
	MaxLen      = 10000
	LiveTTL     = 24 * time.Hour
	FinishedTTL = 10 * time.Minute
)

// atOnce: the entries one write appends go in one MULTI/EXEC, not a bare
// pipeline. Redis serves a reader blocked on a stream after each command
// that feeds it, so a door waiting on a run would wake for the first XADD
// of a batch and read again for the rest; in a MULTI it wakes once, after
// EXEC, with the whole batch (and the end marker riding with it). A
// refused XADD (its seq published already) still fails alone: a MULTI runs
// its other commands.

// Feed publishes to, and reads from, the per-run streams.
type Feed struct {
	rdb    redis.UniversalClient
	prefix string
}

// New returns a feed over rdb with keys under prefix (e.g. "funduq:").
func New(rdb redis.UniversalClient, prefix string) *Feed { return &Feed{rdb: rdb, prefix: prefix} }

// Key is the stream of one run.
func (f *Feed) Key(runID string) string { return f.prefix + "run:" + runID + ":events" }

// Publish appends event seq of runID. Entry ids are "<seq>-1" so the stream
// order is the run's seq order and a re-publish of the same seq is refused.
func (f *Feed) Publish(ctx context.Context, runID string, seq int, event json.RawMessage) error {
	key := f.Key(runID)
	pipe := f.rdb.Pipeline()
	addEvent(ctx, pipe, key, Published{Seq: seq, Event: event})
	pipe.Expire(ctx, key, LiveTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("publish event %d of run %s: %w", seq, runID, err)
	}
	return nil
}

// Published is one stored event to publish: its seq and the event.
type Published struct {
	Seq   int
	Event json.RawMessage
}

// PublishBatch appends evs (in seq order) of runID in one round trip: one
// XADD per event and one EXPIRE, pipelined in one MULTI (see atOnce).
func (f *Feed) PublishBatch(ctx context.Context, runID string, evs []Published) error {
	if len(evs) == 0 {
		return nil
	}
	if len(evs) == 1 {
		return f.Publish(ctx, runID, evs[0].Seq, evs[0].Event)
	}
	key := f.Key(runID)
	pipe := f.rdb.TxPipeline() // see atOnce
	for _, e := range evs {
		addEvent(ctx, pipe, key, e)
	}
	pipe.Expire(ctx, key, LiveTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("publish events %d..%d of run %s: %w", evs[0].Seq, evs[len(evs)-1].Seq, runID, err)
	}
	return nil
}

// End marks the run's stream finished with its final status, after its last
// event, so a live reader knows to stop. The marker carries no outcome: a
// reader that needs one reads the record (EndWith carries it).
func (f *Feed) End(ctx context.Context, runID string, lastSeq int, status string) error {
	return f.end(ctx, runID, lastSeq, []any{"end", status})
}

// EndWith is End carrying o, what the end recorded (o.Status and o.LastSeq
// are the marker's), so a door that relayed the whole round from the feed
// answers without reading the record. An outcome over MaxOutcome is left
// out and the marker says so (OutcomeOmitted): the stream keeps small
// entries, and the reader reads the record as it would after End.
func (f *Feed) EndWith(ctx context.Context, runID string, o Outcome) error {
	return f.PublishAndEnd(ctx, runID, nil, o)
}

// PublishAndEnd is PublishBatch(evs) then EndWith(o) in one round trip,
// for a round whose last events are stored in the same commit as its end:
// a reader gets the events and the marker from one read. The entries go
// in that order, as if published apart (Redis runs a pipeline's commands in
// order); an event refused (its seq published already) does not hold the
// marker back, as PublishBatch's failure never held back EndWith.
func (f *Feed) PublishAndEnd(ctx context.Context, runID string, evs []Published, o Outcome) error {
	vals := []any{"end", o.Status, "outcome_omitted", "1"}
	if raw, ok := MarshalOutcome(o); ok {
		vals = []any{"end", o.Status, "outcome", string(raw)}
	}
	key := f.Key(runID)
	pipe := f.rdb.TxPipeline() // see atOnce
	for _, e := range evs {
		addEvent(ctx, pipe, key, e)
	}
	addMarker(ctx, pipe, key, o.LastSeq, vals)
	pipe.Expire(ctx, key, FinishedTTL)
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	if len(evs) > 0 && len(cmds) >= len(evs)+2 && cmds[len(evs)].Err() == nil {
		// Only events were refused: the marker is in.
		return fmt.Errorf("publish events %d..%d of run %s with its end: %w", evs[0].Seq, evs[len(evs)-1].Seq, runID, err)
	}
	return fmt.Errorf("end stream of run %s: %w", runID, err)
}

func (f *Feed) end(ctx context.Context, runID string, lastSeq int, vals []any) error {
	key := f.Key(runID)
	pipe := f.rdb.Pipeline()
	addMarker(ctx, pipe, key, lastSeq, vals)
	pipe.Expire(ctx, key, FinishedTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("end stream of run %s: %w", runID, err)
	}
	return nil
}

// addEvent queues the XADD of one event: entry id "<seq>-1", so the stream
// order is the run's seq order and a re-publish of a seq is refused.
func addEvent(ctx context.Context, pipe redis.Pipeliner, key string, e Published) {
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: strconv.Itoa(e.Seq) + "-1", MaxLen: MaxLen, Approx: true,
		Values: []any{"seq", e.Seq, "event", string(e.Event)}})
}

// addMarker queues the XADD of an end marker: entry id "<lastSeq>-2",
// after the round's last event.
func addMarker(ctx context.Context, pipe redis.Pipeliner, key string, lastSeq int, vals []any) {
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: strconv.Itoa(lastSeq) + "-2", MaxLen: MaxLen, Approx: true,
		Values: vals})
}

// Entry is one item read from a run's stream: an event, or the end marker.
type Entry struct {
	Seq   int // the event's seq; for the end marker, the last seq of the round it ends
	Event json.RawMessage
	End   string // the final status when this is the end marker
	// Outcome is the end marker's outcome as published (ParseOutcome
	// reads it); nil when the marker carries none: a broker that
	// published End, or one over MaxOutcome (OutcomeOmitted).
	Outcome        json.RawMessage
	OutcomeOmitted bool
}

// ReadSlack is how long past its block a Read waits for Redis's answer
// before it fails (redisbound.Slack): a hung Redis costs a reader its
// block and this, not the Redis client's own bound (block + 10 s for a
// blocking read, its read timeout — none at all with read_timeout=0 —
// while it sets a connection up), so a door falls back to PostgreSQL by
// its own bounds (design.md D13, §Doors under storage faults).
const ReadSlack = redisbound.Slack

// Read blocks up to block for entries after seq `after` (block 0 returns at
// once). It returns nil entries when nothing arrived, and fails when Redis
// has not answered ReadSlack after the block.
func (f *Feed) Read(ctx context.Context, runID string, after int, block time.Duration) ([]Entry, error) {
	// The client must honour context deadlines (go-redis
	// ContextTimeoutEnabled, as door.Connect sets it).
	ctx, cancel := redisbound.Blocking(ctx, block)
	defer cancel()
	args := &redis.XReadArgs{Streams: []string{f.Key(runID), strconv.Itoa(after) + "-1"}, Count: 500, Block: block}
	if block <= 0 {
		args.Block = -1
	}
	res, err := f.rdb.XRead(ctx, args).Result()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read stream of run %s: %w", runID, err)
	}
	var out []Entry
	for _, s := range res {
		for _, m := range s.Messages {
			out = append(out, entryOf(m.ID, m.Values))
		}
	}
	return out, nil
}

// entryOf reads one stream entry; fields it does not know are ignored, so
// a marker a newer broker extends still reads as a marker.
func entryOf(id string, values map[string]any) Entry {
	if st, ok := values["end"].(string); ok {
		// The marker's id is "<last seq>-2": a reader can tell an
		// earlier round's end (a run reopened after a pause) from the
		// current one's.
		last, _, _ := strings.Cut(id, "-")
		seq, _ := strconv.Atoi(last)
		e := Entry{Seq: seq, End: st}
		if raw, ok := values["outcome"].(string); ok && raw != "" {
			e.Outcome = json.RawMessage(raw)
		}
		_, e.OutcomeOmitted = values["outcome_omitted"]
		return e
	}
	seq, _ := strconv.Atoi(fmt.Sprint(values["seq"]))
	ev, _ := values["event"].(string)
	return Entry{Seq: seq, Event: json.RawMessage(ev)}
}
