package agui

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/functions/door"
)

// resumePage is how many stored events one read of openAt takes.
const resumePage = 500

// openAt is the stored events that opened what is still open at seq
// after (a message, tool call, reasoning span or message, step or
// subagent), in their stored order. A resume after that seq sends them
// again, without ids, right after its RUN_STARTED: AG-UI clients
// (@ag-ui/client verifies each stream on its own) refuse an event of
// something the stream did not open, and the stream still resumes strictly
// after the Last-Event-ID, so a client that kept its state gets no event
// twice (design.md §The doors, "A resume from inside a message"). It reads
// the run's events up to after, and only for a resume.
func (h *Handler) openAt(ctx context.Context, runID string, after int) ([]json.RawMessage, error) {
	var o openSet
	for from := 0; from < after; {
		sctx, cancel := door.Step(ctx)
		evs, err := h.o.Store.EventsBetween(sctx, runID, from, after, resumePage)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			o.see(e.Seq, e.Event)
			from = e.Seq
		}
		if len(evs) < resumePage {
			break
		}
	}
	return o.openings(), nil
}

// reopen is openAt for stream s, read again at the tail's polling pace
// while storage fails, as the tail reads it (design.md §Doors under
// storage faults): until it answers, the client goes, or the stream's end
// (then nothing is reopened and the tail ends the stream at after, naming
// it). What it reopens is said in a comment.
func (h *Handler) reopen(ctx context.Context, s *sse, runID string, after int, end time.Time) []json.RawMessage {
	beat := time.Now()
	for {
		open, err := h.openAt(ctx, runID, after)
		if err == nil {
			if len(open) > 0 {
				s.Comment(fmt.Sprintf("resumed inside a message: %d event(s) without ids reopen what was open after seq %d", len(open), after))
			}
			return open
		}
		if ctx.Err() != nil || s.Broken() || (!end.IsZero() && !time.Now().Before(end)) {
			return nil
		}
		h.log.WarnContext(ctx, "resume: reading stored events failed", "run_id", runID, "err", err)
		if time.Since(beat) >= cmp.Or(h.tail.Heartbeat, door.DefaultHeartbeat) {
			s.Comment("keep-alive")
			s.Flush()
			beat = time.Now()
		}
		door.Sleep(ctx, cmp.Or(h.tail.PollInterval, door.DefaultPollInterval))
	}
}

// openSet tracks what a run's events have opened and not yet closed, as
// @ag-ui/client's verifier does: each open thing with the seq of the event
// that opened it, and that event as stored.
type openSet struct{ open map[openKey]opened }

type opened struct {
	seq int
	ev  json.RawMessage
}

type openKey struct{ kind, id, owner string }

// openers and closers map an event type to the kind of thing it opens or
// closes. The legacy THINKING_* events carry no id: one of each is open at
// a time.
var (
	openers = map[string]string{
		agui.TypeTextMessageStart:         "text",
		agui.TypeToolCallStart:            "tool",
		agui.TypeReasoningStart:           "reasoning",
		agui.TypeReasoningMessageStart:    "reasoning_message",
		agui.TypeStepStarted:              "step",
		agui.TypeSubagentStarted:          "subagent",
		agui.TypeThinkingStart:            "thinking",
		agui.TypeThinkingTextMessageStart: "thinking_message",
	}
	closers = map[string]string{
		agui.TypeTextMessageEnd:         "text",
		agui.TypeToolCallEnd:            "tool",
		agui.TypeReasoningEnd:           "reasoning",
		agui.TypeReasoningMessageEnd:    "reasoning_message",
		agui.TypeStepFinished:           "step",
		agui.TypeSubagentFinished:       "subagent",
		agui.TypeSubagentError:          "subagent",
		agui.TypeThinkingEnd:            "thinking",
		agui.TypeThinkingTextMessageEnd: "thinking_message",
	}
)

func (o *openSet) see(seq int, ev json.RawMessage) {
	var e struct {
		Type          string `json:"type"`
		MessageID     string `json:"messageId"`
		ToolCallID    string `json:"toolCallId"`
		StepName      string `json:"stepName"`
		SubagentRunID string `json:"subagentRunId"`
	}
	if json.Unmarshal(ev, &e) != nil {
		return
	}
	switch e.Type {
	case agui.TypeRunStarted, agui.TypeRunFinished, agui.TypeRunError:
		// A run's (or round's) start and end close everything, as the
		// verifier's reset does.
		clear(o.open)
		return
	}
	key := func(kind string) openKey {
		switch kind {
		case "text", "reasoning", "reasoning_message":
			return openKey{kind: kind, id: e.MessageID}
		case "tool":
			return openKey{kind: kind, id: e.ToolCallID}
		case "step":
			return openKey{kind: kind, id: e.StepName, owner: e.SubagentRunID}
		case "subagent":
			return openKey{kind: kind, id: e.SubagentRunID}
		}
		return openKey{kind: kind}
	}
	if kind, ok := openers[e.Type]; ok {
		if o.open == nil {
			o.open = map[openKey]opened{}
		}
		if _, dup := o.open[key(kind)]; !dup {
			o.open[key(kind)] = opened{seq, slices.Clone(ev)}
		}
	} else if kind, ok := closers[e.Type]; ok {
		delete(o.open, key(kind))
	}
}

// openings is the events that opened what is still open, in seq order.
func (o *openSet) openings() []json.RawMessage {
	ops := slices.SortedFunc(maps.Values(o.open), func(a, b opened) int { return a.seq - b.seq })
	evs := make([]json.RawMessage, len(ops))
	for i, op := range ops {
		evs[i] = op.ev
	}
	return evs
}
