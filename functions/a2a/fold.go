package a2a

import (
	"context"
	"encoding/json"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// recordPage is how many events one read of a task's record takes: the
// record is read in keyset pages of (run_id, seq), never whole.
const recordPage = 500

// eventFold is what a task view takes from a run's events — its artifacts,
// its last RUN_ERROR, the events door.AsksOf looks at — folded one event
// at a time as they are read, from a page of the record or from the tail,
// so a view, a stream or a blocking send reads each stored event once
// (issue #19) and keeps none it no longer needs.
type eventFold struct {
	upTo    int // artifacts only from events with seq <= upTo (< 0: all)
	last    int // the highest seq folded: an event at or below it is not folded again
	arts    []artifact
	idx     map[string]int
	lastErr runError // the last RUN_ERROR's code and message
	// chunk is the messageId of the open TEXT_MESSAGE_CHUNK stream ("":
	// none), which a chunk without a messageId continues (AG-UI; the
	// official client's transformChunks does the same).
	chunk string
	// round is door.AsksOf's window, kept when asks: the events after
	// the RUN_FINISHED before the last one (all of them until there are
	// two). A fold that will not show a pause's asks keeps no event.
	asks       bool
	round      []foldedEvent
	lastFinish int  // index in round of its last RUN_FINISHED; -1: none
	trimmed    bool // round starts after a RUN_FINISHED it no longer holds
}

type foldedEvent struct {
	raw    json.RawMessage
	finish bool
}

func newFold(upTo int, asks bool) *eventFold {
	return &eventFold{upTo: upTo, asks: asks, idx: map[string]int{}, lastFinish: -1}
}

// foldFields are the members of an event the fold reads, decoded once.
type foldFields struct {
	Type      string `json:"type"`
	MessageID string `json:"messageId"`
	Delta     string `json:"delta"`
	Message   string `json:"message"`
	Code      string `json:"code"`
}

// read is an event as the fold read it: its type ("" when it has none)
// and, for a text event, its artifact id and delta (textDelta's, "" when
// unreadable).
type read struct {
	Type, ID, Delta string
}

// add folds the event at seq and returns what it read of it. An event at
// or below the last seq folded is only read.
func (f *eventFold) add(seq int, ev json.RawMessage) read {
	var e foldFields
	textRead, errRead := true, true // the text and RUN_ERROR members read
	if json.Unmarshal(ev, &e) != nil {
		// A member of another type than the fold reads: read each part
		// as it is read alone, so one odd member hides nothing else.
		e = foldFields{Type: door.TypeOf(ev)}
		var id, delta string
		id, delta, textRead = textDelta(ev)
		e.MessageID, e.Delta = id, delta
		var re struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		}
		errRead = json.Unmarshal(ev, &re) == nil
		e.Message, e.Code = re.Message, re.Code
	}
	out := read{Type: e.Type}
	isText := e.Type == agui.TypeTextMessageContent || e.Type == agui.TypeTextMessageChunk
	if isText && textRead {
		out.ID, out.Delta = e.MessageID, e.Delta
		if out.ID == "" && e.Type == agui.TypeTextMessageChunk {
			out.ID = f.chunk
		}
		if out.ID == "" {
			out.ID = "text"
		}
	}
	if seq <= f.last {
		return out
	}
	f.last = seq
	switch {
	case e.Type == agui.TypeTextMessageChunk && textRead:
		f.chunk = out.ID
	case agui.EndsTextChunks(e.Type):
		f.chunk = ""
	}
	switch {
	case isText:
		if textRead && (f.upTo < 0 || seq <= f.upTo) {
			f.addText(out.ID, out.Delta)
		}
	case e.Type == agui.TypeRunError:
		if !errRead {
			break
		}
		f.lastErr = runError{code: e.Code, message: e.Message}
	}
	f.addRound(foldedEvent{raw: ev, finish: e.Type == agui.TypeRunFinished})
	return out
}

func (f *eventFold) addText(id, delta string) {
	i, seen := f.idx[id]
	if !seen {
		i = len(f.arts)
		f.idx[id] = i
		f.arts = append(f.arts, artifact{ID: id})
	}
	f.arts[i].Text += delta
}

func (f *eventFold) addRound(e foldedEvent) {
	if !f.asks {
		return
	}
	f.round = append(f.round, e)
	if !e.finish {
		return
	}
	if f.lastFinish >= 0 {
		// A second RUN_FINISHED: what came before the first is an
		// earlier round's, which AsksOf never reads.
		f.round = append([]foldedEvent(nil), f.round[f.lastFinish+1:]...)
		f.trimmed = true
	}
	f.lastFinish = len(f.round) - 1
}

// then folds g, the fold of the events after f's, into f.
func (f *eventFold) then(g *eventFold) {
	for _, a := range g.arts {
		f.addText(a.ID, a.Text)
	}
	if g.lastErr.label() != "" {
		f.lastErr = g.lastErr
	}
	if g.trimmed {
		// g saw two RUN_FINISHEDs: its window is the whole window.
		f.round, f.lastFinish, f.trimmed = append([]foldedEvent(nil), g.round...), g.lastFinish, true
	} else {
		for _, e := range g.round {
			f.addRound(e)
		}
	}
	f.last = max(f.last, g.last)
	if g.last > 0 {
		f.chunk = g.chunk
	}
}

// page folds a page of stored events and reports whether it was full (the
// next page may hold more).
func (f *eventFold) page(evs []store.Event) bool {
	for _, e := range evs {
		f.add(e.Seq, e.Event)
	}
	return len(evs) >= recordPage
}

// rest folds the run's stored events after seq after up to upTo (< 0: no
// bound), a page at a time.
func (f *eventFold) rest(ctx context.Context, st *store.Store, runID string, after, upTo int) error {
	for upTo < 0 || after < upTo {
		sctx, cancel := door.Step(ctx)
		evs, err := st.EventsBetween(sctx, runID, after, upTo, recordPage)
		cancel()
		if err != nil {
			return err
		}
		if !f.page(evs) {
			return nil
		}
		after = evs[len(evs)-1].Seq
	}
	return nil
}

// status is the task status a run's record shows (statusOf).
func (f *eventFold) status(r store.Run) (TaskState, *textMessage, map[string]any) {
	return statusWith(r, f.lastErr)
}

// view is the task view of run r with the events folded and its messages.
func (f *eventFold) view(r store.Run, msgs []store.RunMessage) taskView {
	state, smsg, meta := f.status(r)
	if state == StateInputRequired && f.asks {
		raw := make([]json.RawMessage, len(f.round))
		for i, e := range f.round {
			raw[i] = e.raw
		}
		asks, _ := door.AsksOf(r, raw)
		if asks == nil {
			asks = []string{}
		}
		meta[OutstandingAsksKey] = asks
	}
	return taskView{ID: r.RunID, ContextID: r.ThreadID, State: state, StatusMsg: smsg, Timestamp: r.LastActivityAt,
		Artifacts: f.arts, History: historyOf(r, msgs), Meta: meta}
}
