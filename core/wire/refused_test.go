package wire_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/strictjson"
	"github.com/funduq/funduq-go/core/wire"
)

func TestRefusedReport(t *testing.T) {
	for _, tc := range []struct {
		frame   string
		runID   string
		inEvent bool
	}{
		{`{"type":"event","runId":"r1","event":{"type":"X","a":1,"a":2}}`, "r1", true},
		{`{ "type" : "event" , "runId" : "r1" , "event" :  {"a":1,"a":2}  , "seq": 3 }`, "r1", true},
		{"{\"type\":\"event\",\"runId\":\"r1\",\"event\":{\"delta\":\"a\xffb\"}}", "r1", true},
		{`{"type":"event","runId":"r1","seq":1,"seq":2,"event":{"type":"X"}}`, "r1", false},
		{`{"type":"event","runId":"r1","event":{"a":1,"a":2},"seq":1,"seq":2}`, "r1", false},
		{`{"type":"event","runId":"r1","event":{"type":"X"},"event":{"type":"Y"}}`, "r1", false},
		{`{"type":"ack","runId":"r1","verdict":"accept","verdict":"decline"}`, "r1", false},
		{`{"type":"finish","runId":"r1","x":1,"x":2}`, "r1", false},
		{`{"type":"finish","runId":"r1","type":"finish"}`, "", false},
		{`{"type":"event","runId":"r1","runId":"r2","event":{}}`, "", false},
		{`{"type":"event","run\u0049d":"r1","runId":"r2","event":{}}`, "", false},
		{"{\"type\":\"event\",\"runId\":\"r\xff1\",\"event\":{\"a\":1,\"a\":2}}", "", false},
		{`{"type":"event","runId":"","event":{"a":1,"a":2}}`, "", false},
		{`{"type":"event","runId":7,"event":{"a":1,"a":2}}`, "", false},
		{`{"type":"register","runId":"r1","agents":[{"name":"a","name":"b"}]}`, "", false},
		{`{"type":"event","event":{"a":1,"a":2}}`, "", false},
		{`{"type":"event","runId":"r1","RUNID":"r2","event":{"a":1,"a":2}}`, "r1", false},
		{`{"type":"event","runId":"r1","Seq":1,"event":{"a":1,"a":2}}`, "r1", false},
		{`{"type":"event","runId":"r1","Name":1,"event":{"a":1,"a":2}}`, "r1", true},
		{`["type","event"]`, "", false},
		{`not json`, "", false},
	} {
		runID, inEvent := wire.RefusedReport([]byte(tc.frame))
		if runID != tc.runID || inEvent != tc.inEvent {
			t.Errorf("%s: (%q, %v), want (%q, %v)", tc.frame, runID, inEvent, tc.runID, tc.inEvent)
		}
	}
}

// FuzzRefusedReport: whatever the bytes, no panic; and on a frame the
// strict check passes, the run it names is the one encoding/json reads
// and an event frame's defect is never placed around the event.
func FuzzRefusedReport(f *testing.F) {
	for _, s := range []string{
		`{"type":"event","runId":"r1","event":{"type":"X","a":1,"a":2}}`,
		`{"type":"ack","runId":"r1","verdict":"accept"}`,
		`{"type":"event","runId":"r1","seq":1,"seq":2,"event":{}}`,
		"{\"type\":\"event\",\"runId\":\"r1\",\"event\":\"\xff\"}",
		`{"type":"event","runId":"r1","RUNID":"r2","event":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		runID, inEvent := wire.RefusedReport(raw)
		if runID == "" || strictjson.Check(raw, 0) != nil {
			return
		}
		// Read by exact names, as RefusedReport reads (design.md §The
		// provider wire, "Exact names"): a map's keys are matched exactly.
		var m map[string]json.RawMessage
		var typ, id string
		if err := json.Unmarshal(raw, &m); err != nil || json.Unmarshal(m["runId"], &id) != nil || id != runID {
			t.Fatalf("%q: RefusedReport names %q, encoding/json reads %q (%v)", raw, runID, id, err)
		}
		_ = json.Unmarshal(m["type"], &typ)
		if typ == wire.TypeEvent && m["event"] != nil && !inEvent && !namedLikeAReportField(m) {
			t.Fatalf("%q: a strict event frame's defect placed around its event", raw)
		}
	})
}

// namedLikeAReportField says whether a member's name differs from a report
// frame's field only in case.
func namedLikeAReportField(m map[string]json.RawMessage) bool {
	for k := range m {
		for _, f := range []string{"type", "runId", "accepted", "reason", "event", "seq"} {
			if k != f && strings.EqualFold(k, f) {
				return true
			}
		}
	}
	return false
}
