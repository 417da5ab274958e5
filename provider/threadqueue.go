package provider

import "slices"

// threadQueue runs one thread's runs one at a time, in arrival order
// (Config.SerializePerThread). Its queue is guarded by Client.mu.
type threadQueue struct {
	queue []*runState
}

// enqueueOnThreadLocked appends rs to its thread's queue, starting the queue's
// goroutine if the thread has none. c.mu must be held.
func (c *Client) enqueueOnThreadLocked(threadID string, rs *runState) {
	rs.queue = c.threadQueues[threadID]
	if rs.queue != nil {
		rs.queue.queue = append(rs.queue.queue, rs)
		return
	}
	ln := &threadQueue{queue: []*runState{rs}}
	rs.queue = ln
	c.threadQueues[threadID] = ln
	c.spawnLocked(func() { c.runThreadQueue(threadID, ln) })
}

// runThreadQueue executes the queue's runs until it is empty, then retires
// the queue.
func (c *Client) runThreadQueue(threadID string, ln *threadQueue) {
	for {
		c.mu.Lock()
		if len(ln.queue) == 0 {
			if c.threadQueues[threadID] == ln {
				delete(c.threadQueues, threadID)
			}
			c.mu.Unlock()
			return
		}
		rs := ln.queue[0]
		ln.queue[0] = nil
		ln.queue = ln.queue[1:]
		rs.queue = nil
		rs.started = true
		h := c.agents[rs.run.AgentName].Handler
		c.mu.Unlock()
		c.execute(rs, h)
	}
}

// dropFromThreadQueueLocked removes a run that has not started from its thread's queue.
// c.mu must be held.
func (c *Client) dropFromThreadQueueLocked(rs *runState) {
	if rs.queue == nil {
		return
	}
	rs.queue.queue = slices.DeleteFunc(rs.queue.queue, func(q *runState) bool { return q == rs })
	rs.queue = nil
}
