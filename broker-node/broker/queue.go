package broker

import (
	"context"
	"sync"
)

// queue is a lane's command queue: unbounded, so a sender never blocks on a
// busy lane, and read by the lane alone.
type queue struct {
	mu     sync.Mutex
	items  []command
	busy   bool // an item was popped and its handling is not done
	closed bool // the lane stopped reading: push refuses
	signal chan struct{}
}

func newQueue() *queue { return &queue{signal: make(chan struct{}, 1)} }

// push appends c; it reports false when the lane has stopped reading (c was
// not queued).
func (q *queue) push(c command) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, c)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
	return true
}

// pushFront puts cs, in order, ahead of everything queued: reports kept
// aside and read again (lane.reviewKept). Only the lane itself calls it.
func (q *queue) pushFront(cs []command) {
	if len(cs) == 0 {
		return
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.items = append(append(make([]command, 0, len(cs)+len(q.items)), cs...), q.items...)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// takeEvents pops, without waiting, up to max events at the head of the
// queue that came from link: the ones a lane may store in one batch.
func (q *queue) takeEvents(link *linkState, max int) []eventCmd {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []eventCmd
	for len(out) < max && len(q.items) > 0 {
		c, ok := q.items[0].(eventCmd)
		if !ok || c.link != link {
			break
		}
		out = append(out, c)
		q.items[0] = nil
		q.items = q.items[1:]
	}
	return out
}

// takeFinish pops the head of the queue when it is a finish from link. The
// caller counts it out of the link's backlog (finishCmd.handled) once it
// has taken or refused it.
func (q *queue) takeFinish(link *linkState) (finishCmd, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return finishCmd{}, false
	}
	if c, ok := q.items[0].(finishCmd); ok && c.link == link {
		q.items[0] = nil
		q.items = q.items[1:]
		return c, true
	}
	return finishCmd{}, false
}

// peek returns the command at the head of the queue, or nil.
func (q *queue) peek() command {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	return q.items[0]
}

// close refuses every later push and returns what was still queued.
func (q *queue) close() []command {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	rest := q.items
	q.items = nil
	return rest
}

// pop waits for the next command; ok is false when ctx ends first.
func (q *queue) pop(ctx context.Context) (command, bool) {
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
