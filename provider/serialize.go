package provider

import "slices"

// lane runs one thread's runs one at a time, in arrival order
// (Config.SerializePerThread). Its queue is guarded by Client.mu.
type lane struct {
	queue []*runState
}

// enqueueLaneLocked appends rs to its thread's lane, starting the lane's
// goroutine if the thread has none. c.mu must be held.
func (c *Client) enqueueLaneLocked(threadID string, rs *runState) {
	rs.lane = c.lanes[threadID]
	if rs.lane != nil {
		rs.lane.queue = append(rs.lane.queue, rs)
		return
	}
	ln := &lane{queue: []*runState{rs}}
	rs.lane = ln
	c.lanes[threadID] = ln
	c.spawnLocked(func() { c.runLane(threadID, ln) })
}

// runLane executes the lane's runs until its queue is empty, then retires
// the lane.
func (c *Client) runLane(threadID string, ln *lane) {
	for {
		c.mu.Lock()
		if len(ln.queue) == 0 {
			if c.lanes[threadID] == ln {
				delete(c.lanes, threadID)
			}
			c.mu.Unlock()
			return
		}
		rs := ln.queue[0]
		ln.queue[0] = nil
		ln.queue = ln.queue[1:]
		rs.lane = nil
		rs.started = true
		h := c.agents[rs.run.AgentName].Handler
		c.mu.Unlock()
		c.execute(rs, h)
	}
}

// dropFromLaneLocked removes a run that has not started from its lane.
// c.mu must be held.
func (c *Client) dropFromLaneLocked(rs *runState) {
	if rs.lane == nil {
		return
	}
	rs.lane.queue = slices.DeleteFunc(rs.lane.queue, func(q *runState) bool { return q == rs })
	rs.lane = nil
}
