package agui

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// openAt is what is still open at seq after (a message, tool call,
// reasoning span or message, step or subagent): the stored events that
// opened it, in their stored order. A resume after that seq sends them
// again, without ids, right after its RUN_STARTED: AG-UI clients
// (@ag-ui/client verifies each stream on its own) refuse an event of
// something the stream did not open, and the stream still resumes strictly
// after the Last-Event-ID, so a client that kept its state gets no event
// twice (design.md §The doors, "A resume from inside a message"). It reads
// the run's events up to after, and only for a resume. It holds at most
// ReopenHeldBudget bytes of the opening events: past that it keeps only
// their seqs, and stream reads each such one again as it sends it, so a
// provider that opens many large things and never closes them costs a
// resume no more memory than a page of the tail.
func (h *Handler) openAt(ctx context.Context, runID string, after int) ([]opened, error) {
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
	if f := reopenHeld.Load(); f != nil {
		(*f)(o.peak)
	}
	return o.openings(), nil
}

// reopen is openAt for stream s, read again at the tail's polling pace
// while storage fails, as the tail reads it (design.md §Doors under
// storage faults): until it answers, the client goes, the stream's end, or
// the record stays out of reach for the tail's GiveUp (door.TailStorage:
// nothing can be sent before it is read). What it reopens is said in a
// comment; end is non-zero when the stream is to stop.
func (h *Handler) reopen(ctx context.Context, s *sse, runID string, after int, end time.Time) ([]opened, door.TailEnd) {
	var open []opened
	if e := h.retrying(ctx, s, runID, end, func() (err error) {
		open, err = h.openAt(ctx, runID, after)
		return err
	}); e != 0 {
		return nil, e
	}
	if len(open) > 0 {
		s.Comment(fmt.Sprintf("resumed inside a message: %d event(s) without ids reopen what was open after seq %d", len(open), after))
	}
	return open, 0
}

// opening is the stored event op names: as openAt held it, or read again
// (retrying as reopen does). stop is non-zero when the stream is to stop
// (the client went, its end came, or storage stayed away); ev is nil when
// the run no longer holds the event (retention deleted it: the tail says
// so).
func (h *Handler) opening(ctx context.Context, s *sse, runID string, op opened, end time.Time) (ev json.RawMessage, stop door.TailEnd) {
	if op.ev != nil {
		return op.ev, 0
	}
	stop = h.retrying(ctx, s, runID, end, func() error {
		sctx, cancel := door.Step(ctx)
		defer cancel()
		evs, err := h.o.Store.EventsBetween(sctx, runID, op.seq-1, op.seq, 1)
		if err == nil && len(evs) == 1 {
			ev = evs[0].Event
		}
		return err
	})
	return ev, stop
}

// retrying runs read until it succeeds, again at the tail's polling pace
// (keep-alives at its heartbeat) while storage fails. It returns 0 when
// read succeeded; else why it gave up: door.TailGone (the client went),
// door.TailBudget (the stream's end came) or door.TailStorage (reads kept
// failing for the tail's GiveUp from the start of the first, as the tail
// gives up on a record it cannot go on without).
func (h *Handler) retrying(ctx context.Context, s *sse, runID string, end time.Time, read func() error) door.TailEnd {
	beat := time.Now()
	giveUp := cmp.Or(h.tail.GiveUp, door.StorageGiveUp)
	for first := time.Now(); ; {
		err := read()
		if err == nil {
			return 0
		}
		switch {
		case ctx.Err() != nil || s.Broken():
			return door.TailGone
		case !end.IsZero() && !time.Now().Before(end):
			return door.TailBudget
		case time.Since(first) >= giveUp:
			h.log.WarnContext(ctx, "resume: the record stayed out of reach; ending the stream", "run_id", runID, "err", err)
			return door.TailStorage
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
type openSet struct {
	open map[openKey]opened
	// held is the bytes of the opening events the set holds, peak the
	// most it held at once.
	held, peak int
}

type opened struct {
	seq int
	ev  json.RawMessage
}

// openKey names one open thing. Ids are the provider's, of any length up
// to an event's: a long one is kept as its hash, so what a resume holds
// per open thing is bounded whatever the provider names it.
type openKey struct{ kind, id, owner string }

// keyID is id as an openKey holds it.
func keyID(id string) string {
	if len(id) <= 64 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

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
		o.held = 0
		return
	}
	key := func(kind string) openKey {
		switch kind {
		case "text", "reasoning", "reasoning_message":
			return openKey{kind: kind, id: keyID(e.MessageID)}
		case "tool":
			return openKey{kind: kind, id: keyID(e.ToolCallID)}
		case "step":
			return openKey{kind: kind, id: keyID(e.StepName), owner: keyID(e.SubagentRunID)}
		case "subagent":
			return openKey{kind: kind, id: keyID(e.SubagentRunID)}
		}
		return openKey{kind: kind}
	}
	if kind, ok := openers[e.Type]; ok {
		if o.open == nil {
			o.open = map[openKey]opened{}
		}
		if _, dup := o.open[key(kind)]; !dup {
			op := opened{seq: seq}
			if o.held+len(ev) <= ReopenHeldBudget {
				// Past the budget only the seq: the event is read
				// again as it is sent (Handler.opening).
				op.ev = slices.Clone(ev)
				o.held += len(ev)
				o.peak = max(o.peak, o.held)
			}
			o.open[key(kind)] = op
		}
	} else if kind, ok := closers[e.Type]; ok {
		o.held -= len(o.open[key(kind)].ev)
		delete(o.open, key(kind))
	}
}

// openings is what is still open, in the seq order of the events that
// opened it.
func (o *openSet) openings() []opened {
	return slices.SortedFunc(maps.Values(o.open), func(a, b opened) int { return a.seq - b.seq })
}

// ReopenHeldBudget is how many bytes of opening events a resume's reading
// of the run holds at once (openAt).
const ReopenHeldBudget = 1 << 20
