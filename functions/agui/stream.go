package agui

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// stream answers 200 text/event-stream with run rn's events after seq
// after: the stored backlog, then the live tail, each event once and in seq
// order (SSE id = seq), as door.Tail reads them. It ends after a
// RUN_FINISHED or RUN_ERROR (once the run's end is recorded:
// door.Tail.AwaitEnd), when the run has ended (or paused) with nothing more
// to send, when the client goes, or before the stream's end with a comment
// saying how to resume. fresh: this request just wrote the run, so the
// stream starts on the live feed (door.Tail.Fresh). resumed: after is the
// client's Last-Event-ID, so the stream may start inside a message, which
// it reopens (reopens).
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, rn store.Run, after int, fresh, resumed bool) {
	s := &sse{SSE: door.StartSSE(w), runID: rn.RunID, threadID: rn.ThreadID}
	defer s.Flush()
	s.Comment("funduq run " + rn.RunID)
	ctx := r.Context()
	end := h.streamEnd(ctx)
	var stop door.TailEnd
	if resumed && reopens(rn, after) {
		// A resume from inside a message reopens it: RUN_STARTED, then
		// the events that opened what is open, without ids, then the
		// events after the Last-Event-ID (design.md §The doors, "A resume
		// from inside a message"). After the headers, as the tail's own
		// reads, so a slow record holds no response: the headers go out
		// first, or the client would wait on them as long as the read.
		s.Flush()
		var open []opened
		if open, stop = h.reopen(ctx, s, rn.RunID, after, end); len(open) > 0 {
			s.started()
			s.relayed++
			for _, op := range open {
				var ev json.RawMessage
				if ev, stop = h.opening(ctx, s, rn.RunID, op, end); stop != 0 {
					break
				}
				if ev != nil {
					s.Write("data: " + string(s.shape(ev)) + "\n\n")
				}
			}
			s.Flush()
		}
	}
	t := &door.Tail{O: h.tail, RunID: rn.RunID, ThreadID: rn.ThreadID, ProviderKey: rn.ProviderKey, After: after, Fresh: fresh,
		Relay: s.relay,
		Idle:  func() { s.Comment("keep-alive") },
		Gone:  s.Broken,
		Flush: s.Flush,
	}
	if stop == 0 {
		stop = t.Run(ctx, end)
	}
	switch stop {
	case door.TailGone:
		// The caller hung up; the run goes on (D9). One INFO line naming
		// the run, as the other doors log it (design.md §Logs).
		door.LogCallerGone(h.log.With("run_id", rn.RunID, "thread_id", rn.ThreadID, "provider_key", rn.ProviderKey), r, cmp.Or(ctx.Err(), errStreamBroken))
	case door.TailStopped:
		t.AwaitEnd(ctx, s.Flush)
	case door.TailBudget:
		s.Comment(fmt.Sprintf("stream budget reached: reconnect with GET /runs/%s/events and %s: %d",
			rn.RunID, LastEventIDHeader, t.After))
		// AG-UI clients skip comments and SSE ids: the stream just ended,
		// which @ag-ui/client's HttpAgent resolves as a completed run. Its
		// last event says it is not, typed, for the client's onCustomEvent
		// (design.md §The doors, "A stream's time is up").
		s.streamEnded(t.After, "stream_ended")
	case door.TailStorage:
		// The record this stream must read stayed out of reach (the
		// door's PostgreSQL is away): it ends now, typed as a stream
		// whose time is up, reason storage_unavailable, naming where to
		// resume once storage is back — rather than retry with
		// keep-alives until its budget (design.md §Doors under storage
		// faults). Inside a reopening, the resume point stays the
		// Last-Event-ID: the openings sent carry no id.
		s.Comment(fmt.Sprintf("storage unreachable: reconnect shortly with GET /runs/%s/events and %s: %d",
			rn.RunID, LastEventIDHeader, t.After))
		s.streamEnded(t.After, door.CodeUnavailable)
	case door.TailUnknown:
		// Retention deleted the run while it was read: the stream ends
		// with funduq's RUN_ERROR (no id: not a stored event) saying what
		// a request now is told (design.md §The doors).
		if s.relayed == 0 {
			s.started() // a stream's first event is a RUN_STARTED
		}
		gone, _ := json.Marshal(struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    string `json:"code"`
		}{agui.TypeRunError, "no run " + rn.RunID + ": it is no longer stored (retention deleted it)", door.CodeRunNotFound})
		s.Write("data: " + string(gone) + "\n\n")
	}
}

// reopens reports whether a resume of run rn after seq after may start
// inside something it reopens, so that it reads the run's events up to
// after (openAt): after is inside the run's stored events, or at their
// last while more can follow it. Past the last seq stored when rn was read
// (a seq is stored before it is visible anywhere, D9, so no client had
// it), or at the last of a run that has ended (nothing follows it), there
// is nothing to reopen anything for, and a client's Last-Event-ID there
// costs no read of the run (design.md §The doors, "A resume from inside a
// message").
func reopens(rn store.Run, after int) bool {
	return after > 0 && (after < rn.LastSeq || after == rn.LastSeq && !rn.Status.Terminal())
}

// StreamEndedEvent is the name of the CUSTOM event a stream whose time is
// up ends with: the run goes on, and its value names the run and how to
// resume (design.md §The doors, "A stream's time is up").
const StreamEndedEvent = "funduq.stream_ended"

// streamEnded writes the CUSTOM StreamEndedEvent (without an id: it is not
// a stored event, so a resume from the Last-Event-ID it names does not
// skip or repeat one), after a RUN_STARTED if the stream has had no event
// yet (a stream's first event is a RUN_STARTED).
func (s *sse) streamEnded(after int, reason string) {
	if s.relayed == 0 {
		s.started()
	}
	ended, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Name  string `json:"name"`
		Value any    `json:"value"`
	}{agui.TypeCustom, StreamEndedEvent, map[string]string{
		"reason":      reason,
		"runId":       s.runID,
		"threadId":    s.threadID,
		"lastEventId": strconv.Itoa(after),
		"resume":      "GET /runs/" + s.runID + "/events",
	}})
	s.Write("data: " + string(ended) + "\n\n")
}

// errStreamBroken is why a stream ended whose writes failed before its
// request's context ended.
var errStreamBroken = errors.New("the stream could not be written")

// started writes the RUN_STARTED the door synthesizes (without an id: it
// is not a stored event) for a stream whose first event is another.
func (s *sse) started() {
	started, _ := json.Marshal(struct {
		Type     string `json:"type"`
		ThreadID string `json:"threadId"`
		RunID    string `json:"runId"`
	}{agui.TypeRunStarted, s.threadID, s.runID})
	s.Write("data: " + string(started) + "\n\n")
}

// sse writes one stream's events; they go out at each flush (door.Tail's
// Flush hook: one per batch read).
type sse struct {
	*door.SSE
	runID    string
	threadID string
	relayed  int
}

// LastEventIDHeader is the SSE reconnection header; its value is the seq of
// the last event the client received.
const LastEventIDHeader = door.LastEventIDHeader

// relay writes one stored event (SSE id = seq) and reports whether it ends
// the stream. Known AG-UI types go out without null optional members, at
// any depth (a required member's null, which AG-UI allows, stays), a
// REASONING_MESSAGE_START with the one role AG-UI 1.0 allows, RUN_STARTED
// and RUN_FINISHED naming the run's own thread and run ids whatever the
// provider put there; unknown types untouched. A stream's first event is always a RUN_STARTED: the door
// synthesizes one (without an id: it is not a stored event) when the run's
// first relayed event is anything else.
func (s *sse) relay(seq int, ev json.RawMessage) bool {
	typ := typeOf(ev)
	out := s.shape(ev)
	if s.relayed == 0 && typ != agui.TypeRunStarted {
		s.started()
	}
	s.Write("id: " + strconv.Itoa(seq) + "\ndata: " + string(out) + "\n\n")
	s.relayed++
	return typ == agui.TypeRunFinished || typ == agui.TypeRunError
}

// shape is stored event ev as the door writes it (relay): compact, without
// null optional members, a REASONING_MESSAGE_START with the role AG-UI
// allows, RUN_STARTED and RUN_FINISHED with the run's own ids.
func (s *sse) shape(ev json.RawMessage) []byte {
	typ := typeOf(ev)
	out := []byte(ev)
	if agui.IsKnown(typ) {
		if d, err := agui.DropOptionalNulls(ev); err == nil {
			out = d
		}
	}
	if typ == agui.TypeReasoningMessageStart {
		if d, err := agui.ReasoningRole(out); err == nil {
			out = d
		}
	}
	if typ == agui.TypeRunStarted || typ == agui.TypeRunFinished {
		// The record keeps the provider's event; the caller reads
		// funduq's ids, the ones it continues the thread with.
		if d, err := agui.WithRunIDs(out, s.threadID, s.runID); err == nil {
			out = d
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, out); err == nil {
		out = buf.Bytes()
	}
	return out
}
