package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/wire"
)

// errShutdown ends a link because Run's context ended.
var errShutdown = errors.New("provider: shutting down")

// link is one registered connection. Its read loop and its writer are the
// only goroutines that touch conn (besides close and ping control frames,
// which gorilla allows concurrently).
type link struct {
	conn *websocket.Conn

	// Guarded by Client.mu.
	ctrl    []ctrlFrame // link-scoped frames (acks, queries, resends): lost with the link
	queries map[string]chan wire.QueryResult
	// Finishes written on this link await confirmation (see sync.go):
	// unconfirmed holds their runs; syncQueued and syncDone count the sync
	// queries queued and answered; syncID is the one in flight ("" none);
	// nextSync is when the next may be queued.
	unconfirmed map[*runState]bool
	syncQueued  int64
	syncDone    int64
	syncID      string
	nextSync    time.Time
	// leaving holds the agents a shutdown sent deleteAgent for and funduq
	// has not answered yet.
	leaving map[string]bool

	dead     chan struct{} // closed when the link failed or is being shut down
	deadOnce sync.Once
	// replaced is closed when funduq says a newer process of this key
	// took over every agent this link served; replacedOnce guards it.
	replaced     chan struct{}
	replacedOnce sync.Once
	err          error
	stop         chan struct{} // closed by session to stop the writer

	// pong carries the payload of funduq's latest ping to the writer,
	// which answers it (capacity 1: a newer ping replaces an unanswered one).
	pong chan []byte
}

func (l *link) fail(err error) {
	l.deadOnce.Do(func() {
		l.err = err
		close(l.dead)
	})
}

// session connects to base, registers and serves the link until it fails or
// ctx ends. registered says whether the ceremony completed; redirect is a
// leader a standby named, for the next attempt.
func (c *Client) session(ctx context.Context, base *url.URL) (registered bool, redirect *url.URL, err error) {
	// A client told it was replaced, or whose register funduq refused for
	// good, registers nothing: it only finishes the runs it holds, and
	// funduq takes its reports for them (D5).
	finishOnly := c.replaced.Load() || c.registerRefused.Load()
	var paused []*runState
	var early [][]byte
	var held map[*runState][]*outFrame
	refused := make(map[string]bool)
	if !finishOnly {
		c.mu.Lock()
		c.pruneRetainedLocked()
		paused, early, held = c.pausedRoundsLocked()
		c.mu.Unlock()
	}
	conn, err := c.connect(ctx, base, !finishOnly, early, refused)
	if err != nil {
		var ue *unavailableError
		if errors.As(err, &ue) {
			redirect = ue.leader
		}
		return false, redirect, err
	}
	l := &link{
		conn:        conn,
		queries:     make(map[string]chan wire.QueryResult),
		unconfirmed: make(map[*runState]bool),
		dead:        make(chan struct{}),
		replaced:    make(chan struct{}),
		stop:        make(chan struct{}),
		pong:        make(chan []byte, 1),
	}
	c.mu.Lock()
	c.link = l
	// Say again which runs this client still holds, or finished without
	// funduq confirming it had the finish (sync.go), and resend what they
	// reported on earlier links: frames written to a broker that then died
	// may never have been stored. A
	// broker that took over re-adopts a held run (D7), even a quiet one
	// with no frame to resend, and takes a run it put back to queued
	// (its claim never committed) from the report; it stores each event
	// seq once and drops reports for runs it does not hold. A run whose
	// round paused (interrupt outcome, or a tool call left unanswered) is not announced here, whether it
	// finished or is still held: funduq may have paused it on the lost
	// link's stored RUN_FINISHED and reopened it since, and would take the
	// stale report as the answer to the new round. Its round went out
	// before register instead (pausedRoundsLocked); an offer of the same
	// round is still answered from its frames (handleRun).
	for _, rs := range paused {
		if sent, ok := held[rs]; ok {
			c.earlySentLocked(l, rs, sent, refused[rs.run.ID])
			continue
		}
		switch {
		case refused[rs.run.ID]:
			rs.confirmed = true
		case c.retained[rs.run.ID] == rs:
			c.awaitConfirmLocked(l, rs)
		}
	}
	c.pruneRetainedLocked()
	announced := 0
	for _, rs := range c.retainedOrder {
		if c.retained[rs.run.ID] == rs && !rs.paused && !rs.confirmed {
			c.resendLocked(l, rs)
			announced++
		}
	}
	for _, rs := range c.runs {
		if _, early := held[rs]; early || rs.detached {
			continue // its round went out before register, or funduq ended it
		}
		c.resendLocked(l, rs)
		announced++
	}
	resent := len(l.ctrl) - announced
	buffered := len(c.outbox)
	_, registeredAgents := c.registerFrameLocked()
	c.notifyLocked()
	c.mu.Unlock()
	c.connected.Store(true)
	c.readyOnce.Do(func() { close(c.ready) })
	if finishOnly {
		c.log.Info("provider reconnected to finish its runs, registering nothing", "url", base.String(), "runs", announced, "resending", resent, "buffered", buffered)
	} else {
		c.log.Info("provider registered", "url", base.String(), "agents", registeredAgents, "runs", announced, "resending", resent, "buffered", buffered,
			"paused_rounds", len(paused), "paused_refused", len(refused))
	}

	if c.pingInterval > 0 {
		conn.SetPongHandler(func(string) error {
			return conn.SetReadDeadline(time.Now().Add(c.pongWait()))
		})
	}
	// funduq's own pings show it is alive even while it is not reading the
	// link (it stops reading while it cannot store the link's events), when
	// our pings go unanswered. They extend the read deadline, and the writer
	// answers them: answering here could block this reader behind a write
	// funduq is not taking, or time out and break the link.
	conn.SetPingHandler(func(data string) error {
		if c.pingInterval > 0 {
			_ = conn.SetReadDeadline(time.Now().Add(c.pongWait()))
		}
		select {
		case <-l.pong:
		default:
		}
		l.pong <- []byte(data)
		return nil
	})
	var wg sync.WaitGroup
	wg.Add(3)
	// done is closed when a finish-only link has nothing left to report,
	// or a registered one funduq said was replaced: funduq leaves a
	// replaced link open (design.md §Two processes of one key), so this
	// client finishes its runs over it and then closes it itself.
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !finishOnly {
			select {
			case <-l.replaced:
			case <-l.dead:
				return
			}
		}
		c.awaitNothingHeld(l, done)
	}()
	go func() {
		defer wg.Done()
		c.syncLoop(l)
	}()
	go func() {
		defer wg.Done()
		c.readLoop(l)
	}()
	go func() {
		defer wg.Done()
		c.writeLoop(l)
	}()

	bye := false
	select {
	case <-l.dead:
	case <-done:
		bye = true
		l.fail(ErrReplaced)
	case <-ctx.Done():
		// One deadline for the whole goodbye.
		t := time.NewTimer(drainTimeout)
		c.leave(l, t.C)
		if !c.drain(l, t.C) && c.endHeldRuns() {
			// The handlers that did not return have their runs ended
			// here; those frames get a short deadline of their own.
			t2 := time.NewTimer(endWriteTimeout)
			c.flush(l, t2.C)
			t2.Stop()
		}
		t.Stop()
		l.fail(errShutdown)
	}
	c.mu.Lock()
	c.link = nil
	l.ctrl = nil
	c.notifyLocked()
	c.mu.Unlock()
	c.connected.Store(false)
	close(l.stop)
	if ctx.Err() != nil || bye {
		reason := "provider shutting down"
		if bye {
			reason = "provider replaced by a newer process of its key; its runs are finished"
		}
		_ = conn.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, reason),
			time.Now().Add(time.Second))
	}
	conn.Close()
	wg.Wait()
	if ctx.Err() != nil {
		return true, nil, nil
	}
	return true, nil, l.err
}

// awaitNothingHeld closes done once the client holds nothing more to
// report (holdsNothing) on l, a link that registered nothing or was
// replaced; it returns
// when l dies first. State changes wake it, and a short tick besides, since
// not every change it waits for is announced.
func (c *Client) awaitNothingHeld(l *link, done chan<- struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		if c.holdsNothing() {
			close(done)
			return
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-l.dead:
			return
		}
	}
}

func (c *Client) pongWait() time.Duration { return c.pingInterval * 5 / 2 }

// writeDeadline is the deadline of a write starting now: StallTimeout away,
// or none. A write waits while funduq applies backpressure (is alive but not
// reading); a funduq that is gone is noticed by the read deadline, which
// closes the link and so ends the write.
func (c *Client) writeDeadline() time.Time {
	if c.stallTimeout <= 0 {
		return time.Time{}
	}
	return time.Now().Add(c.stallTimeout)
}

// leave takes every agent out of service on l before the drain: one
// deleteAgent each, then a wait (while the link lives, until expired)
// until funduq has answered each — deleted, or an error naming the agent.
// funduq takes the name offline before it answers either way (an agent with
// a history keeps its record and is answered with an error), so nothing more
// is offered for it and the drain declines nothing of what it serves; an
// offer that crossed a deleteAgent on the wire is declined behind it
// (handleRun), which funduq counts nothing for.
func (c *Client) leave(l *link, expired <-chan time.Time) {
	c.mu.Lock()
	c.startLeavingLocked(l)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		left := len(l.leaving)
		wait := c.changed
		c.mu.Unlock()
		if left == 0 {
			c.log.Info("provider shutdown: agents taken out of service", "agents", len(c.cfg.Agents))
			return
		}
		select {
		case <-wait:
		case <-l.dead:
			return
		case <-expired:
			c.log.Warn("provider shutdown: funduq did not answer every deleteAgent", "after", drainTimeout, "unanswered", left)
			return
		}
	}
}

// startLeavingLocked sends a deleteAgent for every agent on l, once per
// link: leave does it at the start of the drain, and handleRun does it
// first when an offer arrives after the shutdown began but before leave
// did, so that a decline always goes behind its agent's deleteAgent.
// c.mu must be held.
func (c *Client) startLeavingLocked(l *link) {
	if l.leaving != nil {
		return
	}
	l.leaving = make(map[string]bool, len(c.cfg.Agents))
	for _, a := range c.cfg.Agents {
		l.leaving[a.Name] = true
		c.sendCtrlLocked(l, wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: a.Name})
	}
}

// answerLeaving notes funduq's answer to a shutdown's deleteAgent for name
// and reports whether there was one outstanding.
func (c *Client) answerLeaving(l *link, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !l.leaving[name] {
		return false
	}
	delete(l.leaving, name)
	c.notifyLocked()
	return true
}

// drain waits, while the link lives, until every handler has returned and
// every frame has been written, so a shutdown still reports how runs ended.
// It reports whether it got there before expired.
func (c *Client) drain(l *link, expired <-chan time.Time) bool {
	for {
		c.mu.Lock()
		idle := c.active == 0 && len(c.outbox) == 0 && len(l.ctrl) == 0
		wait := c.changed
		c.mu.Unlock()
		if idle {
			return true
		}
		select {
		case <-wait:
		case <-l.dead:
			return false
		case <-expired:
			c.log.Warn("provider shutdown: gave up waiting for handlers and frames", "after", drainTimeout)
			return false
		}
	}
}

// endHeldRuns ends every run the client still holds when a shutdown's
// drain gave up on its handler: a RUN_ERROR naming the shutdown (unless the
// handler emitted its terminal event already) and a finish. Closing the link
// while holding them would fail them provider_left_holding_it and count the
// key abandoned (design.md D5, D6) for what is the provider's own, reported
// failure; this way the caller gets its typed end and nothing is counted.
// A handler still running afterwards gets ErrRunFinished from Emit. It
// reports whether it ended any run.
func (c *Client) endHeldRuns() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ended := false
	for _, rs := range c.runs {
		if rs.done {
			continue
		}
		c.log.Warn("provider shutdown: ending a run whose handler did not return", "run_id", rs.run.ID, "thread_id", rs.run.ThreadID, "agent", rs.run.AgentName, "after", drainTimeout)
		msg := shutdownMessage
		if !rs.started {
			c.dropFromThreadQueueLocked(rs)
			msg = notStartedMessage
		}
		if !rs.terminal {
			ev, _ := json.Marshal(map[string]string{"type": "RUN_ERROR", "message": msg})
			c.enqueueEventLocked(rs, ev, "RUN_ERROR")
		}
		c.finishLocked(rs)
		ended = true
	}
	return ended
}

// flush waits, while the link lives and until expired, for every frame to
// be written.
func (c *Client) flush(l *link, expired <-chan time.Time) {
	for {
		c.mu.Lock()
		idle := len(c.outbox) == 0 && len(l.ctrl) == 0
		wait := c.changed
		c.mu.Unlock()
		if idle {
			return
		}
		select {
		case <-wait:
		case <-l.dead:
			return
		case <-expired:
			c.log.Warn("provider shutdown: gave up writing the ended runs' frames", "after", endWriteTimeout)
			return
		}
	}
}

// readLoop reads frames in arrival order and handles each before the next.
func (c *Client) readLoop(l *link) {
	for {
		if c.pingInterval > 0 {
			_ = l.conn.SetReadDeadline(time.Now().Add(c.pongWait()))
		}
		mt, raw, err := l.conn.ReadMessage()
		if err != nil {
			if websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
				c.endOversizedRun()
			}
			l.fail(fmt.Errorf("reading: %w", err))
			return
		}
		if mt != websocket.TextMessage {
			c.log.Warn("funduq sent a non-text frame; ignored", "message_type", mt)
			continue
		}
		c.handleFrame(l, raw)
	}
}

// handleFrame dispatches one inbound frame.
func (c *Client) handleFrame(l *link, raw []byte) {
	typ, ok := wire.PeekType(raw)
	if !ok {
		c.log.Warn("funduq sent an unparseable frame; ignored", "bytes", len(raw))
		return
	}
	switch typ {
	case wire.TypeRun:
		c.handleRun(l, raw)
	case wire.TypeCancel:
		var f wire.Cancel
		if err := json.Unmarshal(raw, &f); err != nil || f.RunID == "" {
			c.log.Warn("funduq sent a cancel without a runId; ignored")
			return
		}
		c.handleCancel(f.RunID)
	case wire.TypeQueryResult:
		c.handleQueryResult(l, raw)
	case wire.TypeError:
		c.handleError(l, raw)
	case wire.TypeDeleted:
		var d wire.Deleted
		_ = json.Unmarshal(raw, &d)
		if c.answerLeaving(l, d.Name) {
			c.log.Info("agent taken out of service and its record deleted", "agent", d.Name)
			return
		}
		c.log.Info("funduq sent "+typ, "frame", string(raw))
	case wire.TypeRegistered:
		c.log.Info("funduq sent "+typ, "frame", string(raw))
	default:
		c.log.Warn("funduq sent an unexpected frame; ignored", "type", typ)
	}
}

// isRefusal reports whether an error frame's message refuses a report:
// "event refused", "finish refused" or "ack refused", alone or followed by
// ": <reason>".
func isRefusal(msg string) bool {
	for _, kind := range []string{"event refused", "finish refused", "ack refused"} {
		if rest, ok := strings.CutPrefix(msg, kind); ok && (rest == "" || strings.HasPrefix(rest, ":")) {
			return true
		}
	}
	return false
}

// handleError logs funduq's complaint. A refused report (isRefusal) of a
// run this client is still running means funduq does not hold the run (any
// more), so the handler's context is cancelled with ErrRunNotHeld. For a
// run already finished it is the expected answer to a resend of a report
// funduq no longer needs: the run is not resent again.
func (c *Client) handleError(l *link, raw []byte) {
	var e wire.Error
	_ = json.Unmarshal(raw, &e)
	if e.Name != "" && e.RunID == "" && (e.Message == wire.TakenMessage || e.Message == wire.FreedMessage) {
		// Read before a shutdown's deleteAgent answers: such a notice
		// answers none of them.
		c.handleTaken(l, e.Name, e.Message == wire.TakenMessage)
		return
	}
	if e.Name != "" && e.RunID == "" && c.answerLeaving(l, e.Name) {
		// The name went offline before funduq refused to delete its
		// record (it has a history): out of service all the same.
		c.log.Info("agent taken out of service; funduq keeps its record", "agent", e.Name, "message", e.Message)
		return
	}
	attrs := []any{"message", e.Message}
	if e.RunID != "" {
		attrs = append(attrs, "run_id", e.RunID)
	}
	if e.Name != "" {
		attrs = append(attrs, "name", e.Name)
	}
	if e.RunID == "" && e.Message == wire.ReplacedMessage {
		// A newer process of this key registered every agent this one
		// serves: funduq offers this link nothing more and leaves it open
		// (an older funduq closed it). This client finishes what it holds
		// over it (or, closed, on links that register nothing), closes it
		// and stops (Run).
		c.replaced.Store(true)
		l.replacedOnce.Do(func() { close(l.replaced) })
		c.log.Info("a newer process of this key took over its agents; finishing held runs, then stopping")
		return
	}
	refused := e.RunID != "" && isRefusal(e.Message)
	if !refused {
		c.log.Warn("funduq sent error", attrs...)
		return
	}
	c.mu.Lock()
	rs := c.runs[e.RunID]
	running := rs != nil && !rs.done
	if fin := c.retained[e.RunID]; !running && fin != nil {
		c.refusedFinishedLocked(fin)
	}
	c.mu.Unlock()
	if !running {
		c.log.Debug("funduq refused a report of a finished run; ignored", attrs...)
		return
	}
	c.log.Warn("funduq sent error", append(attrs, "thread_id", rs.run.ThreadID)...)
	rs.cancel(ErrRunNotHeld)
}

// writeLoop is the link's only writer of data frames: link-scoped frames
// first (an ack always precedes the events of its run), then the shared
// outbox in order. A frame leaves the outbox only once written, so a frame
// the link could not take is written again on the next link.
func (c *Client) writeLoop(l *link) {
	var tick <-chan time.Time
	if c.pingInterval > 0 {
		t := time.NewTicker(c.pingInterval)
		defer t.Stop()
		tick = t.C
	}
	ping := func() bool {
		if err := l.conn.WriteControl(websocket.PingMessage, nil, c.writeDeadline()); err != nil {
			l.fail(fmt.Errorf("ping: %w", err))
			return false
		}
		return true
	}
	pong := func(data []byte) bool {
		if err := l.conn.WriteControl(websocket.PongMessage, data, c.writeDeadline()); err != nil {
			l.fail(fmt.Errorf("pong: %w", err))
			return false
		}
		return true
	}
	for {
		select {
		case <-tick:
			if !ping() {
				return
			}
		default:
		}
		select {
		case data := <-l.pong:
			if !pong(data) {
				return
			}
		default:
		}
		c.mu.Lock()
		var data []byte
		var of *outFrame
		switch {
		case len(l.ctrl) > 0:
			data = l.ctrl[0].data
		case c.link == l && len(c.outbox) > 0:
			of = c.outbox[0]
			data = of.data
			c.writing, c.tried = of, of
		}
		wait := c.changed
		c.mu.Unlock()

		if data == nil {
			select {
			case <-wait:
			case <-tick:
				if !ping() {
					return
				}
			case data := <-l.pong:
				if !pong(data) {
					return
				}
			case <-l.stop:
				return
			case <-l.dead:
				return
			}
			continue
		}
		err := writeWithin(l.conn, data, c.writeDeadline())
		c.mu.Lock()
		if of != nil && c.writing == of {
			c.writing = nil
		}
		if err != nil {
			c.mu.Unlock()
			l.fail(fmt.Errorf("writing: %w", err))
			return
		}
		if of != nil {
			c.popLocked(l, of)
		} else if len(l.ctrl) > 0 {
			if fin := l.ctrl[0].finished; fin != nil {
				c.awaitConfirmLocked(l, fin)
			}
			l.ctrl[0] = ctrlFrame{}
			l.ctrl = l.ctrl[1:]
		}
		c.notifyLocked()
		c.mu.Unlock()
	}
}

// ctrlFrame is a link-scoped frame; finished is set on a resent finish,
// whose run then awaits confirmation on the link.
type ctrlFrame struct {
	data     []byte
	finished *runState
}

// sendCtrlLocked queues a link-scoped frame. c.mu must be held.
func (c *Client) sendCtrlLocked(l *link, v any) {
	b, err := wire.Marshal(v)
	if err != nil {
		c.log.Error("encoding a frame", "err", err)
		return
	}
	l.ctrl = append(l.ctrl, ctrlFrame{data: b})
	c.notifyLocked()
}

// endOversizedRun answers funduq closing the link over a frame too large
// to read (1009: past sixteen times FUNDUQ_MAX_FRAME_BYTES, README
// "Security and limits"). Only an event can be that large, and resending it
// after the reconnect would close every next link the same way, stalling
// every run the client holds. The largest event written so far is at least
// as large as the one funduq could not read, so it is replaced, under its
// own seq, by a RUN_ERROR that ends its run; its handler's context is
// cancelled with ErrEventTooLarge. Should another event be too large as
// well, the next close takes that one. Frames of the run written after it
// are dropped, as funduq would refuse them after the run's end.
//
// funduq closes on the frame's header, so its write may not have returned
// (the socket is no longer read) or may have failed: the frame a writer
// began (c.tried) counts as written here, or an earlier, stored event
// would be replaced and the oversized one sent again.
func (c *Client) endOversizedRun() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var big *runState
	at, size := -1, 0
	consider := func(rs *runState) {
		written := len(rs.log) - rs.pending
		if c.tried != nil && c.tried.rs == rs && len(c.outbox) > 0 && c.outbox[0] == c.tried {
			written++
		}
		for i, data := range rs.log[:max(written, 0)] {
			if len(data) > size && !(rs.done && i == len(rs.log)-1) {
				big, at, size = rs, i, len(data)
			}
		}
	}
	for _, rs := range c.runs {
		consider(rs)
	}
	for _, rs := range c.retained {
		if !rs.confirmed {
			consider(rs)
		}
	}
	if big == nil {
		c.log.Error("funduq closed the link over a frame too large to read, and no event was written")
		return
	}
	var ev struct {
		Seq int64 `json:"seq"`
	}
	if json.Unmarshal(big.log[at], &ev) != nil || ev.Seq == 0 {
		return
	}
	c.log.Error("funduq closed the link over an event too large to read; ending its run with a RUN_ERROR in its place",
		"run_id", big.run.ID, "thread_id", big.run.ThreadID, "agent", big.run.AgentName, "seq", ev.Seq, "bytes", size)
	msg, _ := json.Marshal(map[string]string{"type": "RUN_ERROR",
		"message": fmt.Sprintf("the agent emitted an event of %d bytes, more than funduq reads", size)})
	frame := eventFrame(big.qid, ev.Seq, msg)
	if first := len(big.log) - big.pending; at >= first {
		// The frame funduq closed over is still the outbox head (c.tried):
		// it is sent as the RUN_ERROR, and nothing after it was written.
		big.log[at] = frame
		c.tried.data = frame
	} else {
		tail := big.log[first:] // not written yet
		if big.done && big.pending == 0 {
			tail = big.log[len(big.log)-1:] // the finish, always last
		}
		big.log[at] = frame
		big.log = append(big.log[:at+1], tail...)
	}
	big.terminal = true
	big.tooLarge = true
	big.cancel(ErrEventTooLarge)
	c.notifyLocked()
}
