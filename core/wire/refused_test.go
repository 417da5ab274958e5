package wire_test

import (
	"encoding/json"
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
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		runID, inEvent := wire.RefusedReport(raw)
		if runID == "" || strictjson.Check(raw, 0) != nil {
			return
		}
		var env struct {
			Type  string          `json:"type"`
			RunID string          `json:"runId"`
			Event json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal(raw, &env); err != nil || env.RunID != runID {
			t.Fatalf("%q: RefusedReport names %q, encoding/json reads %q (%v)", raw, runID, env.RunID, err)
		}
		if env.Type == wire.TypeEvent && env.Event != nil && !inEvent {
			t.Fatalf("%q: a strict event frame's defect placed around its event", raw)
		}
	})
}
