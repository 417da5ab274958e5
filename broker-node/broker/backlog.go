package broker

import (
	"context"
	"sync"
)

// backlog bounds what one link has read and its lanes have not yet
// handled: events and their bytes. One event is always let in when nothing
// waits, however large (a frame is bounded by the link's read limit).
//
// Each event taken gets the next ordinal, and so does each finish (hold,
// which takes no place), so a query can wait for the reports read before
// it (passed): its answer tells the provider that funduq has them
// (link.Server answers a query only then).
type backlog struct {
	mu       sync.Mutex
	n, bytes int
	maxN     int
	maxBytes int
	taken    uint64              // ordinals handed out: the last event taken
	open     map[uint64]struct{} // ordinals taken and not given back
	changed  chan struct{}       // closed and replaced at every release
}

func newBacklog(maxN, maxBytes int) *backlog {
	return &backlog{maxN: maxN, maxBytes: maxBytes, open: make(map[uint64]struct{}), changed: make(chan struct{})}
}

// take counts one event of size bytes in when there is room, returning its
// ordinal; otherwise it returns a channel closed at the next release.
func (b *backlog) take(size int) (ok bool, ord uint64, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == 0 || (b.n < b.maxN && b.bytes+size <= b.maxBytes) {
		b.n++
		b.bytes += size
		b.taken++
		b.open[b.taken] = struct{}{}
		return true, b.taken, nil
	}
	return false, 0, b.changed
}

// give counts one handled event of size bytes, taken as ord, out.
func (b *backlog) give(ord uint64, size int) {
	b.mu.Lock()
	b.n--
	b.bytes -= size
	delete(b.open, ord)
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// hold gives a report that is not an event (a finish) the next ordinal,
// without taking a place: a query read after it waits for it (let).
func (b *backlog) hold() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.taken++
	b.open[b.taken] = struct{}{}
	return b.taken
}

// let counts the report held as ord out; again, or for 0, it does nothing.
func (b *backlog) let(ord uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.open[ord]; !ok {
		return
	}
	delete(b.open, ord)
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *backlog) count() (n, bytes int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n, b.bytes
}

// mark is the ordinal of the last event taken so far.
func (b *backlog) mark() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.taken
}

// passed reports whether every event taken up to mark has been given back;
// if not, changed is closed at the next release.
func (b *backlog) passed(mark uint64) (ok bool, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ord := range b.open {
		if ord <= mark {
			return false, b.changed
		}
	}
	return true, nil
}

// waitPassed waits until every event taken up to mark has been given back;
// false when gone or stop closes, or ctx ends, first.
func (b *backlog) waitPassed(ctx context.Context, mark uint64, gone, stop <-chan struct{}) bool {
	for {
		ok, changed := b.passed(mark)
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-gone:
			return false
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
