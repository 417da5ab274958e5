package broker

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// keptPlaces are places a link keeps taken for runs funduq no longer has
// on it (moved.go: an offer another link of its key answered; unwind.go:
// a run funduq ended while the link still runs it), each until the link
// is heard of for the run or its timer ends, whichever comes first.
// Guarded by b.mu.
type keptPlaces map[string]clockwork.Timer

// keepPlaceLocked keeps ls's place in *kept taken for runID for d, unless
// d is spent or ls is gone. Caller holds b.mu.
func (b *Broker) keepPlaceLocked(ls *linkState, kept *keptPlaces, runID string, d time.Duration) {
	if d <= 0 || b.links[ls.link] != ls {
		return // the deadline passed, or the link is gone already
	}
	if t := (*kept)[runID]; t != nil {
		t.Stop()
	}
	if *kept == nil {
		*kept = keptPlaces{}
	}
	var t clockwork.Timer
	t = b.clock.AfterFunc(d, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if (*kept)[runID] == t { // not freed or kept anew since
			b.freePlaceLocked(ls, *kept, runID)
		}
	})
	(*kept)[runID] = t
}

// freePlaceLocked gives back the place kept in kept for runID, if any, and
// nudges the heads waiting on ls's key. Caller holds b.mu.
func (b *Broker) freePlaceLocked(ls *linkState, kept keptPlaces, runID string) {
	t, ok := kept[runID]
	if !ok {
		return
	}
	t.Stop()
	delete(kept, runID)
	b.nudgeHeadsOfKeyLocked(ls.key)
}

// stop stops every timer and forgets every place: the link is gone, or
// leadership ended.
func (kept keptPlaces) stop() {
	for id, t := range kept {
		t.Stop()
		delete(kept, id)
	}
}
