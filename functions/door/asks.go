package door

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/store"
)

// InterruptRef is one interrupt of a paused run: its id, and the ask id it
// stands for (its toolCallId when it has one, else its id).
type InterruptRef struct {
	ID  string
	Ask string
}

// OpenAsks reads a paused run's outstanding asks, sorted (over the events
// of its last round: after the RUN_FINISHED that ended the round before),
// and its interrupts (the stored pause payload, else the last
// RUN_FINISHED's). Both doors answer and check resolutions over these.
func OpenAsks(ctx context.Context, st *store.Store, paused store.Run) ([]string, []InterruptRef, error) {
	var evs []json.RawMessage
	after := 0
	for {
		sctx, cancel := Step(ctx)
		page, err := st.EventsAfter(sctx, paused.RunID, after, 1000)
		cancel()
		if err != nil {
			return nil, nil, err
		}
		for _, e := range page {
			evs = append(evs, e.Event)
			after = e.Seq
		}
		if len(page) < 1000 {
			break
		}
	}
	asks, refs := AsksOf(paused, evs)
	return asks, refs, nil
}

// AsksOf is OpenAsks over the paused run's events already read, oldest
// first.
func AsksOf(paused store.Run, evs []json.RawMessage) ([]string, []InterruptRef) {
	var finishes []int
	for i, e := range evs {
		if TypeOf(e) == agui.TypeRunFinished {
			finishes = append(finishes, i)
		}
	}
	round := evs
	if len(finishes) >= 2 {
		round = evs[finishes[len(finishes)-2]+1:]
	}
	asks := agui.OpenAsks(round)

	var payload struct {
		Interrupts []json.RawMessage `json:"interrupts"`
	}
	if len(paused.Interrupt) > 0 {
		_ = json.Unmarshal(paused.Interrupt, &payload)
	}
	if payload.Interrupts == nil && len(finishes) > 0 {
		var fin struct {
			Outcome struct {
				Interrupts []json.RawMessage `json:"interrupts"`
			} `json:"outcome"`
		}
		_ = json.Unmarshal(evs[finishes[len(finishes)-1]], &fin)
		payload.Interrupts = fin.Outcome.Interrupts
	}
	var refs []InterruptRef
	for _, raw := range payload.Interrupts {
		var it struct {
			ID         string `json:"id"`
			ToolCallID string `json:"toolCallId"`
		}
		if json.Unmarshal(raw, &it) != nil || it.ID == "" {
			continue
		}
		ask := it.ToolCallID
		if ask == "" {
			ask = it.ID
		}
		refs = append(refs, InterruptRef{ID: it.ID, Ask: ask})
		if !slices.Contains(asks, ask) {
			asks = append(asks, ask)
		}
	}
	slices.Sort(asks)
	return asks, refs
}

// TypeOf is an event's "type" string ("" when it has none).
func TypeOf(ev json.RawMessage) string {
	var v struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(ev, &v) != nil {
		return ""
	}
	s, _ := v.Type.(string)
	return s
}
