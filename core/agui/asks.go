package agui

import (
	"encoding/json"
	"slices"
)

// OpenAsks returns the run's outstanding ask ids, sorted and without
// repeats: every tool call announced by TOOL_CALL_START (or by a
// TOOL_CALL_CHUNK opening one) that no TOOL_CALL_RESULT in events answers,
// plus, when the last RUN_FINISHED's outcome is an interrupt, each of its
// interrupts — by its toolCallId when it has one, else by its id. A run
// whose events hold no RUN_FINISHED has not finished asking: the result is
// then empty. Events that are not JSON objects with a string type are
// skipped; empty ids are ignored. The result is nil when there is no ask.
func OpenAsks(events []json.RawMessage) []string {
	announced := map[string]bool{}
	answered := map[string]bool{}
	var lastFinished map[string]json.RawMessage
	for _, raw := range events {
		obj, ok := decodeObject(raw)
		if !ok {
			continue
		}
		typ, _ := stringField(obj, "type")
		switch typ {
		case TypeToolCallStart, TypeToolCallChunk:
			// A chunk naming a call opens it unless it is already open;
			// either way the call is announced.
			if id, ok := stringField(obj, "toolCallId"); ok && id != "" {
				announced[id] = true
			}
		case TypeToolCallResult:
			if id, ok := stringField(obj, "toolCallId"); ok {
				answered[id] = true
			}
		case TypeRunFinished:
			lastFinished = obj
		}
	}
	if lastFinished == nil {
		return nil
	}
	asks := map[string]bool{}
	for id := range announced {
		if !answered[id] {
			asks[id] = true
		}
	}
	items, _ := decodeArray(interruptsOf(lastFinished))
	for _, raw := range items {
		in, ok := decodeObject(raw)
		if !ok {
			continue
		}
		id, ok := stringField(in, "toolCallId")
		if !ok || id == "" {
			id, _ = stringField(in, "id")
		}
		if id != "" {
			asks[id] = true
		}
	}
	if len(asks) == 0 {
		return nil
	}
	out := make([]string, 0, len(asks))
	for id := range asks {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
