package broker

import (
	"context"
	"sync"
)

// queue is a lane's command queue: unbounded, so a sender never blocks on a
// busy lane, and read by the lane alone.
type queue struct {
	mu     sync.Mutex
	items  []any
	busy   bool // an item was popped and its handling is not done
	signal chan struct{}
}

func newQueue() *queue { return &queue{signal: make(chan struct{}, 1)} }

func (q *queue) push(c any) {
	q.mu.Lock()
	q.items = append(q.items, c)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// pop waits for the next command; ok is false when ctx ends first.
func (q *queue) pop(ctx context.Context) (any, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			c := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			q.busy = true
			q.mu.Unlock()
			return c, true
		}
		q.mu.Unlock()
		select {
		case <-q.signal:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// done marks the popped item handled.
func (q *queue) done() {
	q.mu.Lock()
	q.busy = false
	q.mu.Unlock()
}

// idle reports an empty queue with nothing in hand.
func (q *queue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) == 0 && !q.busy
}
