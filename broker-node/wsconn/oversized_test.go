package wsconn

import (
	"strings"
	"testing"
)

// namesScan names a frame's type and runId only when a second reader could
// not disagree: each once, a plain string, no top-level key escaped. It
// reads the frame in pieces as they stream by, whatever it holds between.
func TestNamesScanNamesOnlyWhatIsPlain(t *testing.T) {
	big := strings.Repeat(`x\"{[`, 50)
	for _, tc := range []struct{ frame, typ, runID string }{
		{`{"type":"event","runId":"r1","event":{"delta":"` + big + `"}}`, "event", "r1"},
		{`{"event":{"a":[1,{"runId":"r9"}],"type":"x"},"runId":"r1", "type" : "event"}`, "event", "r1"},
		{`{"type":"event","runId":"r1","runId":"r2","event":{}}`, "event", ""},
		{`{"type":"event","run\u0049d":"r2","runId":"r1"}`, "", ""},
		{`{"type":"event","runId":"r\u0031"}`, "event", ""},
		{`{"type":"event","runId":7}`, "event", ""},
		{`{"type":"event","runId":{"r":"r1"}}`, "event", ""},
		{`{"type":"event","runId":"` + strings.Repeat("r", 300) + `"}`, "event", ""},
		{`["type","event"]`, "", ""},
		{`{"type":"event","runId":"r1","event":{"delta":"unterminated`, "", ""},
	} {
		s := &namesScan{}
		for i := 0; i < len(tc.frame); i += 7 {
			_, _ = s.Write([]byte(tc.frame[i:min(i+7, len(tc.frame))]))
		}
		o := s.result()
		if o.Type != tc.typ || o.RunID != tc.runID || o.Size != int64(len(tc.frame)) {
			t.Errorf("%.80s: %+v, want type %q run %q", tc.frame, o, tc.typ, tc.runID)
		}
	}
}
