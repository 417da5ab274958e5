package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// LastEventIDHeader resumes a stream: its value is the SSE id (the run
// event seq) of the last item received.
const LastEventIDHeader = door.LastEventIDHeader

// lastEventID reads the request's Last-Event-ID (the seq of the last item
// the client received): -1 when it sent none, -32602 when it is not one.
func (c *call) lastEventID() (int, *RPCError) {
	raw := strings.TrimSpace(c.r.Header.Get(LastEventIDHeader))
	if raw == "" {
		return -1, nil
	}
	n, ok := door.ParseLastEventID(raw)
	if !ok {
		return 0, rpcErr(CodeInvalidParams, "%s must be the non-negative id of an item received", LastEventIDHeader)
	}
	return n, nil
}

// sse writes JSON-RPC responses as server-sent events, each flushed at
// once.
type sse struct {
	*door.SSE
	id json.RawMessage
}

func (s *sse) item(seq int, result any) {
	var b strings.Builder
	if seq > 0 {
		b.WriteString("id: " + strconv.Itoa(seq) + "\n")
	}
	b.WriteString("data: ")
	b.Write(marshalResponse(s.id, result, nil))
	b.WriteString("\n\n")
	s.Write(b.String())
	s.Flush()
}

// fail writes a JSON-RPC error as the stream's last item.
func (s *sse) fail(e *RPCError) {
	s.Write("data: " + string(marshalResponse(s.id, nil, e)) + "\n\n")
	s.Flush()
}

func (s *sse) comment(text string) {
	s.Comment(text)
	s.Flush()
}

// stream answers a streaming send or a resubscribe: the task as it stood
// at seq after, then each of the run's events after it translated to
// status and artifact updates (SSE id = seq), then one final status
// update from the run's recorded status once it settles.
func (c *call) stream(rn store.Run, after, historyLength int) {
	ctx := c.r.Context()
	// A run already settled when its stream opens (a retried send of a
	// task that has ended or paused) is shown as it stands: the snapshot
	// holds all its artifacts and the one final status follows (design.md
	// §The doors, doors.md §3.4). Its events replayed after a snapshot that
	// already says it ended, with the reply in its history, would show the
	// task working again and the reply twice.
	if door.Settled(rn.Status) {
		after = max(after, rn.LastSeq)
	}
	if c.h.o.beforeSnapshot != nil {
		c.h.o.beforeSnapshot()
	}
	pctx, cancel := context.WithTimeout(ctx, 2*door.StepBound(ctx))
	// The projection reads the events up to after, the tail those after
	// it, and the final status comes from what both folded: each stored
	// event is read once.
	view, fold, now, err := c.h.projectRecheck(pctx, rn, after, !door.Settled(rn.Status))
	cancel()
	fresh := false
	if err != nil && c.wrote != nil && door.Unavailable(err) && ctx.Err() == nil {
		// The task this request just wrote, its storage gone since: the
		// stream shows it as written — the run and the caller's messages,
		// no event yet — and follows the live feed (door.Tail.Fresh),
		// rather than answer "storage unavailable, retry" about a task
		// that exists and runs: a retry without an Idempotency-Key would
		// make a second one, and this one would reach nobody (design.md
		// §Doors under storage faults).
		c.h.log.WarnContext(ctx, "a2a: reading the task just written failed; streaming it as written", "run_id", rn.RunID, "err", err)
		fold = newFold(after, false)
		view, now, err, fresh = fold.view(rn, c.wrote.callerMessages()), nil, nil, true
	}
	if err != nil {
		c.fail(err)
		return
	}
	if now != nil && door.Settled(now.Status) {
		// The round ended after rn was read and before its messages were:
		// they hold its reply, which the tail is about to stream in. The
		// snapshot shows the task as of after, so it leaves the reply out,
		// and the caller sees the same stream however fast the agent was.
		view.History = withoutRoundReply(view.History)
	}
	view.History = applyHistoryLength(view.History, historyLength)
	out := &sse{SSE: door.StartSSE(c.w), id: c.req.ID}
	v, taskID, ctxID := c.v, rn.RunID, rn.ThreadID
	out.item(0, streamTask(v, view))

	seen := map[string]bool{}
	for _, a := range view.Artifacts {
		seen[a.ID] = true
	}
	lastSeq := after
	// Working updates are stamped by the door's clock as they are relayed
	// and the final status by the record's last activity; a round whose
	// events are relayed after it settled would have its final status go
	// back. No status is stamped before the one shown last.
	shown := view.Timestamp
	stamp := func(ts time.Time) time.Time {
		if ts.Before(shown) {
			ts = shown
		}
		shown = ts
		return ts
	}
	t := &door.Tail{O: c.h.o.Tail, RunID: rn.RunID, ThreadID: rn.ThreadID, ProviderKey: rn.ProviderKey, After: after, Fresh: fresh,
		Gone: out.Broken,
		Idle: func() { out.comment("keep-alive") },
		Relay: func(seq int, ev json.RawMessage) bool {
			lastSeq = seq
			switch e := fold.add(seq, ev); e.Type {
			case agui.TypeRunFinished, agui.TypeRunError:
				return true // the final status comes from the record
			case agui.TypeRunStarted:
				out.item(seq, streamStatus(v, taskID, ctxID, StateWorking, nil, stamp(c.h.o.Now()), false, nil))
			case agui.TypeTextMessageContent, agui.TypeTextMessageChunk:
				out.item(seq, streamArtifact(v, taskID, ctxID, artifact{ID: e.ID, Text: e.Delta}, seen[e.ID]))
				seen[e.ID] = true
			default:
				out.item(seq, streamStatus(v, taskID, ctxID, StateWorking, nil, stamp(c.h.o.Now()), false,
					map[string]any{AGUIEventKey: ev}))
			}
			return false
		}}
	end := c.h.streamEnd(ctx, c.h.o.StreamBudget)
	budget := func() {
		out.comment(fmt.Sprintf("stream budget reached: resume with %s (id %s) and %s: %d",
			methodName(v, OpSubscribe), taskID, LastEventIDHeader, t.After))
		// A2A clients skip comments: a stream that just closes is read as
		// the task's end, with the task still working. Its last item says
		// it is not (design.md §The doors, "A stream's time is up").
		out.fail(streamEnded(v, taskID, t.After))
	}
	unreachable := func() {
		// The record the stream must read stayed out of reach (the
		// door's PostgreSQL is away): the stream ends with the error a
		// request now gets, naming where to resume once storage is back,
		// rather than retry with keep-alives until its budget (design.md
		// §Doors under storage faults).
		out.comment(fmt.Sprintf("storage unreachable: resume shortly with %s (id %s) and %s: %d",
			methodName(v, OpSubscribe), taskID, LastEventIDHeader, t.After))
		out.fail(storageAway(v, taskID, t.After))
	}
	switch t.Run(ctx, end) {
	case door.TailGone:
		return
	case door.TailBudget:
		budget()
		return
	case door.TailStorage:
		unreachable()
		return
	case door.TailUnknown:
		// Retention deleted the task while it was read: the stream ends
		// with the error a request now gets (design.md §The doors).
		out.fail(c.h.toRPC(c.r, notFoundTask(taskID)))
		return
	}
	cur, err := t.Settle(ctx)
	for err == nil && !door.Settled(cur.Status) {
		// The round's terminal event is stored but its end is not
		// recorded within the settle wait: the leader that stored it
		// went away before the finish, and the next one records the end
		// when it takes over (D7), after the old lease lapses. The one
		// final status is still owed: follow the record, with keep-alives,
		// until it settles or the budget ends.
		out.comment("the run's end is not recorded yet: waiting for it")
		follow := &door.Tail{O: c.h.o.Tail, RunID: rn.RunID, ThreadID: rn.ThreadID, ProviderKey: rn.ProviderKey, After: t.After,
			Gone: out.Broken,
			Idle: func() { out.comment("keep-alive") },
			// Nothing is stored after a terminal event; should something
			// be, the record read next says how the run stands.
			Relay: func(int, json.RawMessage) bool { return true }}
		switch follow.Run(ctx, end) {
		case door.TailGone:
			return
		case door.TailBudget:
			budget()
			return
		case door.TailStorage:
			unreachable()
			return
		}
		cur, err = t.Settle(ctx)
	}
	if err != nil {
		// The caller hanging up ends the wait for the run's end: the read
		// under way fails with the request's context (or its own storage
		// deadline, passing at that moment). That is the caller leaving,
		// logged as the doors log it, not a failed read.
		if door.CallerGone(c.r, ctx.Err()) {
			door.LogCallerGone(c.h.log.With("run_id", rn.RunID, "thread_id", rn.ThreadID, "provider_key", rn.ProviderKey), c.r, err)
			return
		}
		// The final status is owed and cannot be read: the stream ends
		// with the error a request now gets (storage unavailable, retry),
		// never silently, which a client would read as the task's end
		// (design.md §Doors under storage faults). Storage trouble names
		// the task and where to resubscribe from, as a tail's give-up does.
		if door.Unavailable(err) {
			out.fail(storageAway(v, taskID, t.After))
			return
		}
		out.fail(c.h.toRPC(c.r, err))
		return
	}
	state, msg, meta := fold.status(cur)
	seq := 0
	if lastSeq > after {
		seq = lastSeq
	}
	out.item(seq, streamStatus(v, taskID, ctxID, state, msg, stamp(cur.LastActivityAt), state.Terminal() || state == StateInputRequired, meta))
}

// withoutRoundReply is h without the agent messages after its last user
// message: the reply of the round that message opened.
func withoutRoundReply(h []textMessage) []textMessage {
	end := len(h)
	for end > 0 && h[end-1].Role == "agent" {
		end--
	}
	if end == 0 { // no user message: nothing to tell a round by
		return h
	}
	return h[:end]
}

func methodName(v Version, op Op) string {
	for _, m := range Methods {
		if m.Op == op {
			if v == V10 {
				return m.V10
			}
			return m.V03
		}
	}
	return ""
}

// streamEnded is a stream's last item when its time is up (its budget, or
// the Lambda deadline less the margin) before its task settled: the task
// goes on, and data names it and the Last-Event-ID to resume from with
// tasks/resubscribe (SubscribeToTask on 1.0).
func streamEnded(v Version, taskID string, after int) *RPCError {
	method := methodName(v, OpSubscribe)
	return &RPCError{Code: CodeStreamEnded,
		Message: fmt.Sprintf("this stream's time is up; task %s goes on: resume with %s and %s: %d", taskID, method, LastEventIDHeader, after),
		Data:    map[string]any{"reason": "stream_ended", "taskId": taskID, "lastEventId": strconv.Itoa(after), "resume": method}}
}

// storageAway is a stream's last item when the record it must read stayed
// out of reach (door.TailStorage): the error a request gets while storage
// is away (-32043), its data naming the task and the Last-Event-ID to
// resume from with tasks/resubscribe (SubscribeToTask on 1.0).
func storageAway(v Version, taskID string, after int) *RPCError {
	method := methodName(v, OpSubscribe)
	return &RPCError{Code: CodeUnavailable,
		Message: fmt.Sprintf("storage is unreachable; task %s goes on: resume shortly with %s and %s: %d", taskID, method, LastEventIDHeader, after),
		Data:    map[string]any{"reason": door.CodeUnavailable, "taskId": taskID, "lastEventId": strconv.Itoa(after), "resume": method},
		status:  http.StatusServiceUnavailable, retryAfter: 1}
}
