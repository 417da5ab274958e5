package broker

import (
	"time"

	"github.com/funduq/funduq-go/core/store"
)

// endedRuns remembers the last rounds this broker saw end: a run's last,
// when it reached a terminal status, or the round a run paused on
// (input-required), by the queued_at it was queued with. A late read of
// the run as queued — a catch-up page read before its lane claimed it, or
// a notice processed after its lane already ran the round — then opens no
// lane: an offer of a round that is over would reach the provider before
// its offering write is refused, and be retracted. An answer reopens a
// paused run with a later queued_at (store.ReopenRun), so its round is
// taken. Remembering an ended round can only be right; the bound keeps the
// set small (the lane's own first write, refused for an ended run,
// covers what has been forgotten here).
type endedRuns struct {
	ids  map[string]endedRound
	ring []string
	next int
}

// endedRound is what is remembered of a run's last ended round.
type endedRound struct {
	queuedAt time.Time // the round that paused; zero: the run ended for good
	key      string    // the key serving its agent, the only one told it ended
	// lapsedOn is the key an offer of the run had lapsed on when it ended
	// unclaimed (lane.gaveUpOn): that key's late ack, refused, keeps its
	// link's place while it unwinds the run (unwind.go). Taken once.
	lapsedOn string
}

const endedRunsKept = 4096

func newEndedRuns() *endedRuns {
	return &endedRuns{ids: make(map[string]endedRound, endedRunsKept), ring: make([]string, endedRunsKept)}
}

// add remembers that run id, of an agent key serves, reached a terminal
// status; lapsedOn is the key its offer had lapsed on, unclaimed since, or "".
func (e *endedRuns) add(id, key, lapsedOn string) {
	e.remember(id, endedRound{key: key, lapsedOn: lapsedOn})
}

// paused remembers that the round of run id queued at queuedAt paused.
func (e *endedRuns) paused(id, key string, queuedAt time.Time) {
	e.remember(id, endedRound{queuedAt: queuedAt, key: key})
}

func (e *endedRuns) remember(id string, r endedRound) {
	if _, ok := e.ids[id]; ok {
		e.ids[id] = r // a later round, or the run's end
		return
	}
	if old := e.ring[e.next]; old != "" {
		delete(e.ids, old)
	}
	e.ring[e.next] = id
	e.ids[id] = r
	e.next = (e.next + 1) % len(e.ring)
}

// endedFor reports whether run id is remembered as ended (or paused) and
// key is the one serving its agent: the key that may hear so.
func (e *endedRuns) endedFor(id, key string) bool {
	r, ok := e.ids[id]
	return ok && r.key == key
}

// takeLapsed reports whether run id ended unclaimed after its offer to key
// lapsed, and forgets it: one late ack keeps a place, a repeat does not.
func (e *endedRuns) takeLapsed(id, key string) bool {
	r, ok := e.ids[id]
	if !ok || r.lapsedOn == "" || r.lapsedOn != key || !r.queuedAt.IsZero() {
		return false
	}
	r.lapsedOn = ""
	e.ids[id] = r
	return true
}

// has reports whether a round of run id is remembered as ended.
func (e *endedRuns) has(id string) bool {
	_, ok := e.ids[id]
	return ok
}

// over reports whether r, read as queued, is a round already ended here.
func (e *endedRuns) over(r store.Run) bool {
	at, ok := e.ids[r.RunID]
	return ok && (at.queuedAt.IsZero() || !r.QueuedAt.After(at.queuedAt))
}
