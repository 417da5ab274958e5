package wire

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/funduq/funduq-go/core/strictjson"
)

// RefusedReport reads a provider frame the strict JSON check refused
// (core/strictjson) only as far as that is safe: the run a report frame
// (ack, event, finish) names, when its type and runId each appear once and
// are themselves strict — two readers agree on them whatever else the
// frame holds — and whether the defect lies inside an event frame's event
// alone. runID is "" when the frame cannot be tied to a run. A member
// named like a report's field but not exactly is a defect around the
// event (design.md §The provider wire, "Exact names"). An event
// whose defect is its own is a malformed event of that run (design.md
// D18); a defect around it refuses the frame naming the run (D15).
// reportNames are the fields of the report frames.
var reportNames = []string{"type", "runId", "accepted", "reason", "event", "seq"}

func RefusedReport(raw []byte) (runID string, inEvent bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	var typ, run json.RawMessage
	seen := map[string]int{}
	evStart, evEnd := 0, 0
	variant := false // a member named like a report's field, not exactly
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "", false
		}
		seen[k]++
		if f := foldedName(k); f != "" && slices.Contains(reportNames, f) {
			variant = true
		}
		switch k {
		case "type":
			typ = v
		case "runId":
			run = v
		case "event":
			evEnd = int(dec.InputOffset())
			evStart = evEnd - len(v)
		}
	}
	if seen["type"] != 1 || seen["runId"] != 1 || strictjson.Check(typ, 0) != nil || strictjson.Check(run, 0) != nil {
		return "", false
	}
	var kind, id string
	if json.Unmarshal(typ, &kind) != nil || json.Unmarshal(run, &id) != nil || id == "" {
		return "", false
	}
	switch kind {
	case TypeAck, TypeFinish:
		return id, false
	case TypeEvent:
		if seen["event"] != 1 || variant {
			return id, false
		}
		rest := make([]byte, 0, len(raw)-(evEnd-evStart)+4)
		rest = append(append(append(rest, raw[:evStart]...), "null"...), raw[evEnd:]...)
		return id, strictjson.Check(rest, 0) == nil
	}
	return "", false
}
