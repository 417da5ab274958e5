package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/strictjson"
	"github.com/funduq/funduq-go/core/wire"
)

// Run is one run handed to a Handler.
type Run struct {
	// ID is funduq's run id.
	ID string
	// ThreadID is funduq's thread id (the envelope's threadId, or the run
	// input's when the envelope carries null).
	ThreadID string
	// AgentName is the agent the run is for.
	AgentName string
	// Input is the AG-UI RunAgentInput exactly as delivered.
	Input json.RawMessage

	rs *runState
}

// runState is the client's book-keeping for one accepted run. Fields other
// than the immutable ones are guarded by Client.mu.
type runState struct {
	c      *Client
	run    *Run
	qid    string // the run id as a JSON string
	ctx    context.Context
	cancel context.CancelCauseFunc

	queue    *threadQueue // set while queued behind its thread's earlier runs
	started  bool         // the handler was (or is about to be) called
	done     bool         // finish is queued
	pending  int          // frames of this run in the outbox
	seq      int64        // last event seq assigned
	terminal bool         // RUN_FINISHED or RUN_ERROR was emitted
	tooLarge bool         // funduq closed a link over one of its events (endOversizedRun)
	paused   bool         // the last RUN_FINISHED finished asking (isInterrupt, or a tool call left open)
	// toolCalls are the round's tool calls by id, true once a
	// TOOL_CALL_RESULT answered one: an unanswered one at RUN_FINISHED is
	// an ask, and funduq pauses the run on it (design.md §The status
	// machine).
	toolCalls map[string]bool
	// detached: funduq refused the paused round resent before a register
	// (it paused the run already, or reopened it), or reopened the run
	// while the round was still held here: nothing more of the round is
	// sent (its finish would be taken for the new round's), unless the
	// same round is offered again.
	detached bool
	// confirmed: funduq showed it had the run's finish (sync.go), so a
	// reconnect does not resend the run; a re-offer still is answered
	// from its frames.
	confirmed bool
	confirmAt int64 // the sync on the finish's link whose answer confirms it

	// input is the offered run input, compacted: an offer of a finished
	// run with the same input is the same delivery offered again, one with
	// another input is a new round of the run (a paused run reopened).
	input []byte
	// log is every frame of the run produced so far (events, then finish),
	// in order; its last pending frames are still in the outbox. Frames
	// already written are dropped oldest first beyond maxBuffered.
	log [][]byte
	// finishedAt is when the finish was written (the run is retained).
	finishedAt time.Time
}

// outFrame is a frame of a run waiting in the outbox.
type outFrame struct {
	rs     *runState
	data   []byte
	finish bool
}

// handleRun answers an offer from the client's own state — refused when the
// frame does not validate or for an agent it does not serve; declined when
// full or while it shuts down; otherwise accepted at once — and starts the
// accepted run.
func (c *Client) handleRun(l *link, raw []byte) {
	d, err := wire.DecodeRunFrame(raw)
	runID := d.RunID
	if err == nil {
		err = checkDelivered(d)
	} else if runID == "" {
		// Refused, but answered by its run id when it has one.
		var probe struct {
			RunID string `json:"runId"`
		}
		_ = json.Unmarshal(raw, &probe)
		runID = probe.RunID
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.link != l {
		return // the link is going away; funduq will offer again
	}
	if err != nil {
		if runID == "" {
			c.log.Warn("funduq offered a run without a runId; cannot answer", "err", err)
			return
		}
		reason := "frame does not validate as a DeliveredRun: " + err.Error()
		c.log.Warn("refusing run", "run_id", runID, "reason", reason)
		c.ackLocked(l, runID, false, reason)
		return
	}
	input := compactJSON(d.RunInput)
	if rs := c.runs[d.RunID]; rs != nil {
		if !rs.paused || bytes.Equal(rs.input, input) {
			// Offered again (e.g. by a broker that took over while the
			// answer was in flight): it is already ours, so the answer is
			// the same, with what it reported so far in case that was lost.
			c.log.Info("run offered again; already accepted", "run_id", d.RunID, "thread_id", d.ThreadID)
			rs.detached = false
			c.resendLocked(l, rs)
			return
		}
		// Another input for a run whose round paused here and is still
		// held (its finish not written, or its handler not returned):
		// funduq paused it (on a lost link's stored RUN_FINISHED) and an
		// answer reopened it. The old round is over; what is left of it is
		// not sent, or it would be taken for the new round's.
		c.log.Info("paused run reopened while its round was still held here; the new round is handled afresh", "run_id", d.RunID, "thread_id", d.ThreadID)
		c.detachLocked(rs)
	}
	c.pruneRetainedLocked()
	if rs := c.retained[d.RunID]; rs != nil {
		if bytes.Equal(rs.input, input) {
			// Finished here, but the broker never recorded the claim (it
			// died first): the run is ours and its report is complete, so
			// it is accepted and reported again, not handled twice.
			c.log.Info("finished run offered again; resending its report", "run_id", d.RunID, "thread_id", d.ThreadID, "frames", len(rs.log))
			c.resendLocked(l, rs)
			return
		}
		// Another input for the same run: a new round (a paused run
		// reopened), handled afresh.
		c.forgetRetainedLocked(rs)
	}
	agent := c.agents[d.AgentName]
	if agent == nil {
		// Permanent: this client will never serve it, which design.md
		// §Counters files under refused. A bare decline would leave the run
		// re-offered and count misdeclared.
		reason := fmt.Sprintf("agent %q is not served by this provider", d.AgentName)
		c.log.Warn("refusing run for an agent this client does not serve", "run_id", d.RunID, "thread_id", d.ThreadID, "agent", d.AgentName)
		c.ackLocked(l, d.RunID, false, reason)
		return
	}
	if c.runCtx.Err() != nil {
		// Shutting down: the agents are being taken out of service on the
		// link (deleteAgent), so this offer crossed that on the wire. It is
		// declined behind the deleteAgent: funduq reads that first, counts
		// nothing for a decline from a link that no longer serves the agent
		// (design.md §Counters), and the run waits for the next process
		// serving it; a refusal would fail the caller's run for good.
		c.startLeavingLocked(l)
		c.log.Info("declining run: shutting down", "run_id", d.RunID, "thread_id", d.ThreadID, "agent", d.AgentName)
		c.ackLocked(l, d.RunID, false, "")
		return
	}
	if c.maxRuns > 0 && c.inFlight >= c.maxRuns {
		c.log.Info("declining run: full", "run_id", d.RunID, "thread_id", d.ThreadID, "in_flight", c.inFlight, "max", c.maxRuns)
		c.ackLocked(l, d.RunID, false, "")
		return
	}
	threadID := ""
	if d.ThreadID != nil {
		threadID = *d.ThreadID
	} else {
		var in struct {
			ThreadID string `json:"threadId"`
		}
		_ = json.Unmarshal(d.RunInput, &in)
		threadID = in.ThreadID
	}
	ctx, cancel := context.WithCancelCause(c.runCtx)
	rs := &runState{c: c, qid: quote(d.RunID), ctx: ctx, cancel: cancel, input: input}
	rs.run = &Run{ID: d.RunID, ThreadID: threadID, AgentName: d.AgentName, Input: d.RunInput, rs: rs}
	c.runs[d.RunID] = rs
	c.inFlight++
	// The ack is queued before the handler can emit, and the writer sends
	// link frames first, so the verdict always precedes the run's events.
	c.ackLocked(l, d.RunID, true, "")
	if c.cfg.SerializePerThread && threadID != "" {
		c.enqueueOnThreadLocked(threadID, rs)
		return
	}
	rs.started = true
	c.spawnLocked(func() { c.execute(rs, agent.Handler) })
}

// checkDelivered adds the checks DecodeDeliveredRun leaves to the reader.
func checkDelivered(d wire.DeliveredRun) error {
	switch {
	case d.RunID == "":
		return errors.New("runId is empty")
	case d.AgentName == "":
		return errors.New("agentName is empty")
	case !isJSONObject(d.RunInput):
		return errors.New("runInput is not an object")
	case !isJSONObject(d.Metadata):
		return errors.New("metadata is not an object")
	}
	return nil
}

// resendLocked announces on l that the client holds (or finished) rs and
// queues every frame of rs already written on an earlier link, or to this
// one, again, in order, with their original seq: the ack and the frames go
// ahead of the outbox, where the run's unwritten frames follow them. funduq
// stores an event seq once per round and drops a report for a run it does
// not hold, so resending what arrived costs nothing. c.mu must be held.
func (c *Client) resendLocked(l *link, rs *runState) {
	c.ackLocked(l, rs.run.ID, true, "")
	written := len(rs.log) - rs.pending
	if c.writing != nil && c.writing.rs == rs {
		// Being written now, ahead of the ack: resent too, so the resend
		// is whole whichever way that write goes.
		written++
	}
	written = max(written, 0)
	for i, data := range rs.log[:written] {
		f := ctrlFrame{data: data}
		if rs.done && i == len(rs.log)-1 {
			// The finish (always the last frame): funduq has to confirm
			// it again, on this link.
			f.finished = rs
			rs.confirmed = false
		}
		l.ctrl = append(l.ctrl, f)
	}
}

// isInterrupt reports whether a RUN_FINISHED event has an interrupt outcome
// (funduq then pauses the run, input-required, and may reopen it, as it
// does a round that left a tool call unanswered).
func isInterrupt(event []byte) bool {
	var ev struct {
		Outcome struct {
			Type string `json:"type"`
		} `json:"outcome"`
	}
	return json.Unmarshal(event, &ev) == nil && ev.Outcome.Type == "interrupt"
}

// toolCallID is a tool call event's toolCallId, read by its exact name as
// funduq reads it ("" when it has none).
func toolCallID(event []byte) string {
	var ev map[string]json.RawMessage
	var id string
	if json.Unmarshal(event, &ev) == nil && json.Unmarshal(ev["toolCallId"], &id) == nil {
		return id
	}
	return ""
}

// compactJSON is raw without insignificant whitespace (raw itself if it
// does not parse).
func compactJSON(raw []byte) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return bytes.Clone(raw)
	}
	return b.Bytes()
}

// logFrameLocked appends a frame to rs's log, dropping the oldest written
// frames beyond maxBuffered (frames still waiting are never dropped). c.mu
// must be held.
func (c *Client) logFrameLocked(rs *runState, data []byte) {
	rs.log = append(rs.log, data)
	if over := min(len(rs.log)-c.maxBuffered, len(rs.log)-rs.pending); over > 0 {
		clear(rs.log[:over])
		rs.log = rs.log[over:]
	}
}

// retainLocked keeps rs, whose finish was just written, for resending.
// c.mu must be held.
func (c *Client) retainLocked(rs *runState) {
	if c.retention <= 0 {
		return
	}
	rs.finishedAt = c.now()
	c.retained[rs.run.ID] = rs
	c.retainedOrder = append(c.retainedOrder, rs)
	c.pruneRetainedLocked()
}

// pruneRetainedLocked forgets finished runs retained longer than Retention,
// and the oldest beyond maxRetained. c.mu must be held.
func (c *Client) pruneRetainedLocked() {
	now := c.now()
	n := 0
	for _, rs := range c.retainedOrder {
		if c.retained[rs.run.ID] != rs {
			n++ // already forgotten
			continue
		}
		if len(c.retained) <= c.maxRetained && now.Sub(rs.finishedAt) < c.retention {
			break
		}
		delete(c.retained, rs.run.ID)
		n++
	}
	if n > 0 {
		clear(c.retainedOrder[:n])
		c.retainedOrder = c.retainedOrder[n:]
	}
}

// forgetRetainedLocked drops a retained run. c.mu must be held.
func (c *Client) forgetRetainedLocked(rs *runState) {
	if c.retained[rs.run.ID] == rs {
		delete(c.retained, rs.run.ID)
	}
	// Its entry in retainedOrder is skipped when pruning reaches it.
}

func (c *Client) ackLocked(l *link, runID string, accepted bool, reason string) {
	a := wire.Ack{Type: wire.TypeAck, RunID: runID, Accepted: &accepted}
	if reason != "" {
		a.Reason = &reason
	}
	c.sendCtrlLocked(l, a)
}

// handleCancel passes funduq's request on: a running handler's context is
// cancelled; a run still queued behind its thread is dropped and finished.
func (c *Client) handleCancel(runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := c.runs[runID]
	if rs == nil || rs.done {
		c.log.Info("cancel for a run this client is not running", "run_id", runID)
		return
	}
	c.log.Info("funduq asked to cancel run", "run_id", runID, "thread_id", rs.run.ThreadID)
	rs.cancel(ErrCancelRequested)
	if !rs.started {
		c.dropFromThreadQueueLocked(rs)
		c.finishLocked(rs)
	}
}

// execute runs the handler and ends the run.
func (c *Client) execute(rs *runState, h Handler) {
	defer rs.cancel(ErrRunFinished)
	if rs.ctx.Err() != nil {
		// Cancelled before its turn came: never started. When Run is
		// stopping, a RUN_ERROR says so; a bare finish would read as an
		// agent whose stream ended without finishing.
		c.mu.Lock()
		if c.runCtx.Err() != nil && !rs.done {
			ev, _ := json.Marshal(map[string]string{"type": "RUN_ERROR", "message": notStartedMessage})
			c.enqueueEventLocked(rs, ev, "RUN_ERROR")
		}
		c.finishLocked(rs)
		c.mu.Unlock()
		return
	}
	err := callHandler(rs.ctx, h, rs.run)
	c.mu.Lock()
	defer c.mu.Unlock()
	var pe *panicError
	switch {
	case errors.As(err, &pe):
		// A bug in the agent: an error with the stack, which is all that
		// leads its author to the line (the caller sees only the value).
		c.log.Error("handler panicked", "run_id", rs.run.ID, "thread_id", rs.run.ThreadID, "agent", rs.run.AgentName, "panic", fmt.Sprint(pe.value), "stack", string(pe.stack))
	case err != nil:
		c.log.Info("handler returned an error", "run_id", rs.run.ID, "thread_id", rs.run.ThreadID, "err", err)
	case !rs.terminal && !rs.done:
		// Nothing says how the run ended, so funduq fails it
		// (design.md §The status machine, step 4); say so where the
		// author looks, not only to the caller.
		c.log.Warn("handler returned without emitting RUN_FINISHED or RUN_ERROR: funduq fails the run provider_stream_ended_without_finishing",
			"run_id", rs.run.ID, "thread_id", rs.run.ThreadID, "agent", rs.run.AgentName)
	}
	if err != nil && !rs.terminal && !rs.done {
		ev, _ := json.Marshal(map[string]string{"type": "RUN_ERROR", "message": err.Error()})
		c.enqueueEventLocked(rs, ev, "RUN_ERROR")
	}
	c.finishLocked(rs)
}

// panicError is a handler's panic turned into its error, with the stack
// of the goroutine where it happened.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }

// callHandler calls h, turning a panic into a *panicError.
func callHandler(ctx context.Context, h Handler, run *Run) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: debug.Stack()}
		}
	}()
	return h(ctx, run)
}

// detachLocked ends what rs, a held run whose paused round funduq has
// ended and reopened, sends: its unwritten frames leave the outbox, its
// finish will not be queued, and the run id is free for the new round.
// c.mu must be held.
func (c *Client) detachLocked(rs *runState) {
	rs.detached = true
	rs.confirmed = true
	var mine []*outFrame
	for _, of := range c.outbox {
		if of.rs == rs {
			mine = append(mine, of)
		}
	}
	c.dropFromOutboxLocked(mine)
	if c.runs[rs.run.ID] == rs {
		delete(c.runs, rs.run.ID)
	}
}

// finishLocked queues the run's finish and frees its place. c.mu must be held.
func (c *Client) finishLocked(rs *runState) {
	if rs.done {
		return
	}
	rs.done = true
	c.inFlight--
	data := []byte(`{"type":"finish","runId":` + rs.qid + `}`)
	if rs.detached {
		// funduq has the round ended (design.md D7): the finish is kept
		// for a re-offer of the same round, not sent.
		c.logFrameLocked(rs, data)
		if c.runs[rs.run.ID] == rs {
			delete(c.runs, rs.run.ID)
			c.retainLocked(rs)
		}
		c.notifyLocked()
		return
	}
	c.outbox = append(c.outbox, &outFrame{rs: rs, data: data, finish: true})
	rs.pending++
	c.logFrameLocked(rs, data)
	c.notifyLocked()
}

// enqueueEventLocked queues one event with the next seq. c.mu must be held.
func (c *Client) enqueueEventLocked(rs *runState, event []byte, typ string) {
	rs.seq++
	data := eventFrame(rs.qid, rs.seq, event)
	if typ == "RUN_ERROR" || typ == "RUN_FINISHED" {
		rs.terminal = true
	}
	switch typ {
	case "TOOL_CALL_START", "TOOL_CALL_CHUNK":
		if id := toolCallID(event); id != "" && !rs.toolCalls[id] {
			if rs.toolCalls == nil {
				rs.toolCalls = make(map[string]bool)
			}
			rs.toolCalls[id] = false
		}
	case "TOOL_CALL_RESULT":
		if id := toolCallID(event); id != "" {
			if rs.toolCalls == nil {
				rs.toolCalls = make(map[string]bool)
			}
			rs.toolCalls[id] = true
		}
	case "RUN_FINISHED":
		rs.paused = isInterrupt(event)
		for _, answered := range rs.toolCalls {
			rs.paused = rs.paused || !answered
		}
	}
	c.outbox = append(c.outbox, &outFrame{rs: rs, data: data})
	rs.pending++
	c.logFrameLocked(rs, data)
	c.notifyLocked()
}

// eventFrame is the event frame of run qid (a JSON string) at seq.
func eventFrame(qid string, seq int64, event []byte) []byte {
	data := make([]byte, 0, len(event)+len(qid)+64)
	data = append(data, `{"type":"event","runId":`...)
	data = append(data, qid...)
	data = append(data, `,"seq":`...)
	data = strconv.AppendInt(data, seq, 10)
	data = append(data, `,"event":`...)
	data = append(data, event...)
	return append(data, '}')
}

// popLocked removes the head frame, just written on l. c.mu must be held.
func (c *Client) popLocked(l *link, of *outFrame) {
	if len(c.outbox) == 0 || c.outbox[0] != of {
		return
	}
	c.outbox[0] = nil
	c.outbox = c.outbox[1:]
	of.rs.pending--
	if c.tried == of {
		c.tried = nil
	}
	if of.finish && c.runs[of.rs.run.ID] == of.rs {
		delete(c.runs, of.rs.run.ID)
		c.retainLocked(of.rs)
		c.awaitConfirmLocked(l, of.rs)
	}
}

// Emit sends one AG-UI event for the run: any JSON-marshalable object with a
// string "type" (a map, a struct, or json.RawMessage / []byte holding the
// JSON). Events are delivered in the order emitted, each with the next seq.
// While the link is down they are buffered and resent after the next
// register; when MaxBufferedFrames of the run's frames are waiting, Emit waits
// for room until ctx ends. Emit returns ErrRunFinished after the run's
// terminal event (RUN_FINISHED or RUN_ERROR: funduq stores nothing of a
// round after its end) and after the handler has returned, ErrRunNotHeld
// once funduq refused one of the run's reports, and ErrEventTooLarge once
// funduq closed a link over one of its events. An event that funduq would
// refuse as malformed (core/agui Validate: a known type missing a required
// field, a field of the wrong type, text PostgreSQL cannot store; and its
// strict read of the frame: an object repeating a key, more than 63 levels
// of nesting) is not sent: Emit returns an error wrapping ErrInvalidEvent
// saying why, and the run goes on.
func (r *Run) Emit(ctx context.Context, event any) error {
	if r == nil || r.rs == nil {
		return ErrDetachedRun
	}
	raw, typ, err := encodeEvent(event)
	if err != nil {
		return err
	}
	rs := r.rs
	c := rs.c
	c.mu.Lock()
	for {
		if rs.done || rs.terminal {
			// funduq stores nothing of a round after its terminal event
			// and refuses what follows it, so it is refused here, at the
			// call, before its refusal on the link could be taken for
			// funduq no longer holding the run (ErrRunNotHeld).
			c.mu.Unlock()
			return ErrRunFinished
		}
		if rs.tooLarge {
			c.mu.Unlock()
			return ErrEventTooLarge
		}
		if cause := context.Cause(rs.ctx); errors.Is(cause, ErrRunNotHeld) {
			// funduq refused a report of the run: it would refuse this
			// one too, so the handler hears it here as well as from ctx.
			c.mu.Unlock()
			return cause
		}
		if rs.pending < c.maxBuffered {
			break
		}
		wait := c.changed
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		c.mu.Lock()
	}
	c.enqueueEventLocked(rs, raw, typ)
	c.mu.Unlock()
	return nil
}

// encodeEvent renders an event compactly and checks it is an object with a
// string type (funduq ends a run on an event without one).
func encodeEvent(event any) ([]byte, string, error) {
	var raw []byte
	var err error
	switch v := event.(type) {
	case json.RawMessage:
		raw, err = wire.Marshal(v)
	case []byte:
		raw, err = wire.Marshal(json.RawMessage(v))
	default:
		raw, err = wire.Marshal(event)
	}
	if err != nil {
		return nil, "", fmt.Errorf("provider: event does not encode as JSON: %w", err)
	}
	typ, ok := wire.PeekType(raw)
	if !ok {
		return nil, "", errors.New(`provider: an event must be a JSON object with a string "type"`)
	}
	// funduq fails the whole run on an event its AG-UI check refuses
	// (design.md §The provider link); the same check here refuses it at
	// the call, where its author sees which field, and sends nothing.
	if _, err := agui.Validate(raw); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	// funduq reads every frame strictly (no repeated key, at most
	// strictjson.DefaultMaxDepth levels) and fails the run over an event
	// that breaks it; the event sits one level inside its frame. A map
	// cannot repeat a key, but json.RawMessage can.
	if err := strictjson.Check(raw, strictjson.DefaultMaxDepth-1); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	return raw, typ, nil
}

// EmitText emits one assistant text message: TEXT_MESSAGE_START, a
// TEXT_MESSAGE_CONTENT carrying text (omitted when text is empty, since AG-UI
// requires a non-empty delta) and TEXT_MESSAGE_END.
func (r *Run) EmitText(ctx context.Context, messageID, text string) error {
	if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_START", "messageId": messageID, "role": "assistant"}); err != nil {
		return err
	}
	if text != "" {
		if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": messageID, "delta": text}); err != nil {
			return err
		}
	}
	return r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_END", "messageId": messageID})
}

// Messages returns the run input's AG-UI messages, oldest first (nil when the
// input has none or they do not parse).
func (r *Run) Messages() []json.RawMessage {
	var in struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if json.Unmarshal(r.Input, &in) != nil {
		return nil
	}
	return in.Messages
}

// LastUserText returns the text of the last user message in the input: its
// content when that is a string, or its text parts joined by newlines when it
// is a list of input parts; "" when there is none.
func (r *Run) LastUserText() string {
	msgs := r.Messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(msgs[i], &m) != nil || m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			return s
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &parts) != nil {
			return ""
		}
		text := ""
		for _, p := range parts {
			if p.Type != "text" {
				continue
			}
			if text != "" {
				text += "\n"
			}
			text += p.Text
		}
		return text
	}
	return ""
}
