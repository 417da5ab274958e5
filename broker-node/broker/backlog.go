package broker

import "sync"

// backlog bounds what one link has read and its lanes have not yet
// handled: events and their bytes. One event is always let in when nothing
// waits, however large (a frame is bounded by the link's read limit).
type backlog struct {
	mu       sync.Mutex
	n, bytes int
	maxN     int
	maxBytes int
	changed  chan struct{} // closed and replaced at every release
}

func newBacklog(maxN, maxBytes int) *backlog {
	return &backlog{maxN: maxN, maxBytes: maxBytes, changed: make(chan struct{})}
}

// take counts one event of size bytes in when there is room; otherwise it
// returns a channel closed at the next release.
func (b *backlog) take(size int) (ok bool, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == 0 || (b.n < b.maxN && b.bytes+size <= b.maxBytes) {
		b.n++
		b.bytes += size
		return true, nil
	}
	return false, b.changed
}

// give counts one handled event of size bytes out.
func (b *backlog) give(size int) {
	b.mu.Lock()
	b.n--
	b.bytes -= size
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

func (b *backlog) count() (n, bytes int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n, b.bytes
}
