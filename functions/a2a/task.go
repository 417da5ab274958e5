package a2a

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// TaskState is an A2A task state, independent of the wire version.
type TaskState int

const (
	StateUnspecified TaskState = iota
	StateSubmitted
	StateWorking
	StateInputRequired
	StateCompleted
	StateFailed
	StateCanceled
)

// Wire names per version.
var stateNames = map[TaskState][2]string{
	StateUnspecified:   {"unknown", "TASK_STATE_UNSPECIFIED"},
	StateSubmitted:     {"submitted", "TASK_STATE_SUBMITTED"},
	StateWorking:       {"working", "TASK_STATE_WORKING"},
	StateInputRequired: {"input-required", "TASK_STATE_INPUT_REQUIRED"},
	StateCompleted:     {"completed", "TASK_STATE_COMPLETED"},
	StateFailed:        {"failed", "TASK_STATE_FAILED"},
	StateCanceled:      {"canceled", "TASK_STATE_CANCELED"},
}

// Name is the state's wire name in version v.
func (s TaskState) Name(v Version) string {
	n := stateNames[s]
	if v == V10 {
		return n[1]
	}
	return n[0]
}

// ParseTaskState reads a wire state name of either version.
func ParseTaskState(name string) (TaskState, bool) {
	for s, n := range stateNames {
		if s != StateUnspecified && (n[0] == name || n[1] == name) {
			return s, true
		}
	}
	return StateUnspecified, false
}

// Terminal: nothing more happens to the task.
func (s TaskState) Terminal() bool {
	return s == StateCompleted || s == StateFailed || s == StateCanceled
}

// StateMapping is the one table from run status to task state (design.md
// §The doors, D1). A cancel request never maps to canceled: only the settled status does.
var StateMapping = map[run.Status]TaskState{
	run.Queued:        StateSubmitted,
	run.Offering:      StateSubmitted,
	run.Running:       StateWorking,
	run.Cancelling:    StateWorking, // plus CancelRequestedKey
	run.InputRequired: StateInputRequired,
	run.Completed:     StateCompleted,
	run.Failed:        StateFailed,
	run.Cancelled:     StateCanceled,
}

// StateOf maps a run status (StateUnspecified for a status not in the table).
func StateOf(s run.Status) TaskState { return StateMapping[s] }

// Metadata keys funduq puts on tasks and status updates.
const (
	// CancelRequestedKey marks a task whose cancel was asked for and is
	// pending (design.md §The doors: the marker rides on the request, not
	// the record).
	CancelRequestedKey = "funduq/cancelRequested"
	// InterruptKey carries a paused run's stored pause payload.
	InterruptKey = "funduq/interrupt"
	// OutstandingAsksKey lists a paused task's open ask ids, sorted: what
	// an answer's resolution proof signs over (design.md §The doors).
	OutstandingAsksKey = "funduq/outstandingAsks"
	// AGUIEventKey carries an AG-UI event with no A2A counterpart, whole.
	AGUIEventKey = "funduq/aguiEvent"
)

// InterjectionExtension is the interjection extension's URI; its
// declaration rides in the request metadata under AddressedRunIDKey.
const (
	InterjectionExtension = "https://github.com/hukaichun/funduq/ext/interjection/v1"
	AddressedRunIDKey     = InterjectionExtension + "/addressedRunId"
)

// textMessage is an A2A message with one text part.
type textMessage struct {
	ID        string
	Role      string // "user" or "agent"
	Text      string
	ContextID string
	TaskID    string
}

type artifact struct {
	ID   string
	Text string
}

// taskView is a task as projected from a run, before wire encoding.
type taskView struct {
	ID        string
	ContextID string
	State     TaskState
	StatusMsg *textMessage
	Timestamp time.Time
	Artifacts []artifact
	History   []textMessage
	Meta      map[string]any
}

// runError is what a run's last RUN_ERROR said.
type runError struct{ code, message string }

// label is the error's code, else its message.
func (e runError) label() string {
	if e.code != "" {
		return e.code
	}
	return e.message
}

// statusWith is the task status run r shows, lastErr being its last
// RUN_ERROR. A failed task's status message is the recorded reason (else
// lastErr's label), followed by the RUN_ERROR's own sentence when it says
// more: doors.md §3.7.2 gives a caller the event's message, and the code
// stays what a client branches on.
func statusWith(r store.Run, lastErr runError) (TaskState, *textMessage, map[string]any) {
	st := StateOf(r.Status)
	meta := map[string]any{}
	// The marker says a cancel is pending: only while the run is still
	// active, never on a settled (or paused) task.
	if r.CancelRequestedBy != nil && !st.Terminal() && st != StateInputRequired {
		meta[CancelRequestedKey] = true
	}
	if r.Status == run.InputRequired && len(r.Interrupt) > 0 {
		meta[InterruptKey] = json.RawMessage(r.Interrupt)
	}
	var msg *textMessage
	if r.Status == run.Failed {
		reason := r.FailureReason
		if reason == "" {
			reason = lastErr.label()
		}
		if m := lastErr.message; m != "" && m != reason {
			reason += ": " + m
		}
		msg = &textMessage{ID: r.RunID + "-error", Role: "agent", Text: reason, ContextID: r.ThreadID, TaskID: r.RunID}
	}
	return st, msg, meta
}

// textDelta reads a text event's artifact id and delta.
func textDelta(ev json.RawMessage) (id, delta string, ok bool) {
	var e struct {
		Type      string `json:"type"`
		MessageID string `json:"messageId"`
		Delta     string `json:"delta"`
	}
	if json.Unmarshal(ev, &e) != nil || (e.Type != agui.TypeTextMessageContent && e.Type != agui.TypeTextMessageChunk) {
		return "", "", false
	}
	if e.MessageID == "" {
		e.MessageID = "text"
	}
	return e.MessageID, e.Delta, true
}

// historyOf is the run's recorded user and assistant messages as A2A
// messages.
func historyOf(r store.Run, msgs []store.RunMessage) []textMessage {
	var out []textMessage
	for _, m := range msgs {
		var v struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m.Message, &v) != nil {
			continue
		}
		role := ""
		switch v.Role {
		case "user":
			role = "user"
		case "assistant":
			role = "agent"
		default:
			continue
		}
		var text string
		if json.Unmarshal(v.Content, &text) != nil {
			text = aguiContentText(v.Content)
		}
		out = append(out, textMessage{ID: m.MessageID, Role: role, Text: text, ContextID: r.ThreadID, TaskID: r.RunID})
	}
	return out
}

// aguiContentText joins the text parts of an AG-UI multimodal content array.
func aguiContentText(raw json.RawMessage) string {
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	s := ""
	for _, p := range parts {
		if p.Type == "text" {
			s += p.Text
		}
	}
	return s
}

// applyHistoryLength: absent (<0) keeps all, 0 none, N the last N.
func applyHistoryLength(h []textMessage, n int) []textMessage {
	if n < 0 || n >= len(h) {
		return h
	}
	return slices.Clone(h[len(h)-n:])
}

// project reads what a task view of run r needs from the store: its
// messages and its events, in one round trip for a run of up to
// recordPage events and a page per round trip beyond (keyset pages, each
// event read once). evsUpTo, when >= 0, limits the artifacts to events
// with seq <= evsUpTo (a stream's opening snapshot as of where its tail
// starts); the fold it returns has read the events up to there, so a tail
// from evsUpTo carries it on without reading any of them again.
//
// Events are read up to evsUpTo alone unless r's status is told by later
// ones: a pause's open asks, a failure with no recorded reason.
func (h *Handler) project(ctx context.Context, r store.Run, evsUpTo int) (taskView, *eventFold, error) {
	view, f, _, err := h.projectRecheck(ctx, r, evsUpTo, false)
	return view, f, err
}

// projectRecheck is project that, with recheck, also reads r's row again
// after its messages (store.RecordRead.Recheck) and returns it: how a
// stream learns that a round it took for live had ended before the
// messages it is about to show were read.
func (h *Handler) projectRecheck(ctx context.Context, r store.Run, evsUpTo int, recheck bool) (taskView, *eventFold, *store.Run, error) {
	upTo := evsUpTo
	if r.Status == run.InputRequired || r.Status == run.Failed && r.FailureReason == "" {
		upTo = -1
	}
	f := newFold(evsUpTo, r.Status == run.InputRequired)
	sctx, cancel := door.Step(ctx)
	rec, err := h.o.Store.ReadRecord(sctx, store.RecordRead{RunID: r.RunID, UpTo: upTo, Limit: recordPage, Recheck: recheck})
	cancel()
	if err != nil {
		return taskView{}, nil, nil, err
	}
	if f.page(rec.Events) {
		if err := f.rest(ctx, h.o.Store, r.RunID, f.last, upTo); err != nil {
			return taskView{}, nil, nil, err
		}
	}
	return f.view(r, rec.Messages), f, rec.Rechecked, nil
}
