package provider

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/funduq/funduq-go/core/wire"
)

// Confirming a finish. The wire answers a report funduq does not take with
// an error frame and one it takes with nothing, so a finished run's finish
// is only known to be stored once funduq shows it got past it: funduq reads
// a link's frames in order, one at a time, and answers a query after every
// frame before it. After a finish is written the client sends a sync query
// (a method funduq does not serve, answered at once with an error result);
// its answer says funduq read the finish. A second sync, sent a second
// after that answer, says funduq was still alive well after taking it — a
// leader that took the finish and died before storing it never answers the
// second. Once both are answered (or funduq refused a report of the run
// with an error, which is an answer too) the run is confirmed: a reconnect
// does not resend it, though a re-offer of it is still answered from its
// frames (a broker that took over before the claim was stored offers it
// again). Syncs go out one at a time, only while some finish on the link
// awaits confirmation, and cover every finish written before them.

// syncMethod is the query method of a sync. funduq answers a query of a
// method it does not know with an error result, at once and without
// touching storage, after handling every frame the link sent before it.
const syncMethod = "funduq.sync"

// defaultSyncSettle is how long after one sync's answer the next is sent.
const defaultSyncSettle = time.Second

// awaitConfirmLocked records that rs's finish was just written on l. Its
// confirmation needs the two syncs queued after now. c.mu must be held.
func (c *Client) awaitConfirmLocked(l *link, rs *runState) {
	if c.retention <= 0 || c.retained[rs.run.ID] != rs || rs.confirmed {
		// Not kept (so never resent either), or funduq already answered
		// it: an error naming the run can beat this write's bookkeeping.
		return
	}
	rs.confirmAt = l.syncQueued + 2
	l.unconfirmed[rs] = true
	c.notifyLocked()
}

// syncLoop sends l's syncs while some finish on it awaits confirmation.
func (c *Client) syncLoop(l *link) {
	for {
		c.mu.Lock()
		var d time.Duration
		if len(l.unconfirmed) > 0 && l.syncID == "" && c.link == l {
			if d = time.Until(l.nextSync); d <= 0 {
				l.syncQueued++
				l.syncID = "sync-" + strconv.FormatInt(l.syncQueued, 10)
				c.sendCtrlLocked(l, wire.Query{Type: wire.TypeQuery, QueryID: l.syncID, Method: syncMethod, Params: json.RawMessage(`{}`)})
			}
		}
		changed := c.changed
		c.mu.Unlock()
		var t *time.Timer
		var fired <-chan time.Time
		if d > 0 {
			t = time.NewTimer(d)
			fired = t.C
		}
		select {
		case <-changed:
		case <-fired:
		case <-l.dead:
		case <-l.stop:
		}
		if t != nil {
			t.Stop()
		}
		select {
		case <-l.dead:
			return
		case <-l.stop:
			return
		default:
		}
	}
}

// syncAnsweredLocked takes the answer to sync id on l, if it is one, and
// confirms the runs it completes. c.mu must be held.
func (c *Client) syncAnsweredLocked(l *link, id string) bool {
	if id == "" || id != l.syncID {
		return false
	}
	l.syncID = ""
	l.syncDone = l.syncQueued
	l.nextSync = time.Now().Add(c.syncSettle)
	n := 0
	for rs := range l.unconfirmed {
		if rs.confirmAt <= l.syncDone {
			rs.confirmed = true
			delete(l.unconfirmed, rs)
			n++
		}
	}
	if n > 0 {
		c.log.Debug("funduq confirmed finished runs", "runs", n, "sync", id)
	}
	c.notifyLocked()
	return true
}

// refusedFinishedLocked notes that funduq answered a report of the finished
// run rs with an error: it does not want it, so it is not resent. c.mu must
// be held.
func (c *Client) refusedFinishedLocked(rs *runState) {
	rs.confirmed = true
	if l := c.link; l != nil {
		delete(l.unconfirmed, rs)
	}
}

// pausedRoundsLocked returns the runs whose round ended paused (an interrupt
// outcome, or a tool call left unanswered) that funduq may not have whole, and their frames (the round's
// events with their seqs, then its finish), which the next link writes
// after the handshake's proof and before its register (design.md D7):
// finished runs whose finish funduq has not confirmed, and runs still held
// whose RUN_FINISHED with an interrupt is queued or written — their finish
// not written yet, or their handler not returned. funduq pauses a run on a
// lost link's stored RUN_FINISHED without waiting for its finish, so either
// may have been reopened since, and on a registered link a report of the
// key is taken for the new round (the late ack, D15). Before register it
// is taken only by a run still held for this key's lost link, which it
// re-adopts and pauses; a run funduq has reopened (or paused already) has
// it refused, the expected answer, and the new round is offered after
// register as usual. held gives, for each run still held, the frames of
// its own in the outbox now: they go out with the round, so a link that
// registers takes them out of the outbox (earlySentLocked). A held run
// funduq refused (detached) is left out. c.mu must be held.
func (c *Client) pausedRoundsLocked() (runs []*runState, frames [][]byte, held map[*runState][]*outFrame) {
	for _, rs := range c.retainedOrder {
		if c.retained[rs.run.ID] != rs || !rs.paused || rs.confirmed || rs.pending > 0 {
			continue
		}
		runs = append(runs, rs)
		frames = append(frames, rs.log...)
	}
	held = make(map[*runState][]*outFrame)
	for _, rs := range c.runs {
		if rs.paused && !rs.detached {
			held[rs] = nil
			runs = append(runs, rs)
			frames = append(frames, rs.log...)
		}
	}
	if len(held) > 0 {
		for _, of := range c.outbox {
			if _, ok := held[of.rs]; ok {
				held[of.rs] = append(held[of.rs], of)
			}
		}
	}
	return runs, frames, held
}

// earlySentLocked takes the frames of rs, a run still held, that went out
// before l's register (pausedRoundsLocked) out of the outbox: they are
// written. refused says funduq refused the round (it paused the run
// already, or reopened it): rs is detached, and what it reports later (its
// finish) is not sent, since on the registered link it would be taken for
// the new round. A round funduq took (it re-adopted the run) is the held
// run's as before; its finish, once written, awaits confirmation. c.mu
// must be held.
func (c *Client) earlySentLocked(l *link, rs *runState, sent []*outFrame, refused bool) {
	c.dropFromOutboxLocked(sent)
	if refused {
		rs.detached = true
		rs.confirmed = true
	}
	if rs.done && rs.pending == 0 {
		// Its finish went out too, as the writer's pop would have it.
		delete(c.runs, rs.run.ID)
		c.retainLocked(rs)
		if !refused {
			c.awaitConfirmLocked(l, rs)
		}
	}
}

// dropFromOutboxLocked takes frames out of the outbox. c.mu must be held.
func (c *Client) dropFromOutboxLocked(frames []*outFrame) {
	if len(frames) == 0 {
		return
	}
	drop := make(map[*outFrame]bool, len(frames))
	for _, of := range frames {
		drop[of] = true
	}
	kept := c.outbox[:0]
	for _, of := range c.outbox {
		if drop[of] {
			of.rs.pending--
			if c.tried == of {
				c.tried = nil
			}
			continue
		}
		kept = append(kept, of)
	}
	clear(c.outbox[len(kept):])
	c.outbox = kept
	c.notifyLocked()
}
