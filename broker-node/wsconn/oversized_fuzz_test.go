package wsconn

import (
	"encoding/json"
	"testing"

	"github.com/funduq/funduq-go/core/strictjson"
)

// namesScan never names what a second reader would read otherwise: on a
// frame that is strict JSON (one object, no repeated key), a type or run id
// it names is the string that member holds, however the frame is cut into
// pieces; it counts every byte; and it reads any bytes without failing.
func FuzzNamesScan(f *testing.F) {
	f.Add(`{"type":"event","runId":"r1","event":{"delta":"x"}}`, uint8(7))
	f.Add(`{"event":{"a":[1,{"runId":"r9"}],"type":"x"},"runId":"r1", "type" : "event"}`, uint8(3))
	f.Add(`{"type":"event","run\u0049d":"r2","runId":"r1"}`, uint8(1))
	f.Add(`{"type":"event","runId":"r\u0031"}`, uint8(64))
	f.Add(`["type","event"]`, uint8(2))
	f.Fuzz(func(t *testing.T, frame string, piece uint8) {
		n := int(piece)%16 + 1
		s := &namesScan{}
		for i := 0; i < len(frame); i += n {
			_, _ = s.Write([]byte(frame[i:min(i+n, len(frame))]))
		}
		o := s.result()
		if o.Size != int64(len(frame)) {
			t.Fatalf("size %d, want %d", o.Size, len(frame))
		}
		if strictjson.Check([]byte(frame), 0) != nil {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(frame), &m) != nil {
			if o.Type != "" || o.RunID != "" {
				t.Fatalf("%q is not an object, yet names %+v", frame, o)
			}
			return
		}
		for name, got := range map[string]string{"type": o.Type, "runId": o.RunID} {
			if got == "" {
				continue
			}
			var want string
			if err := json.Unmarshal(m[name], &want); err != nil || want != got {
				t.Fatalf("%q: names %s %q, a reader reads %s", frame, name, got, m[name])
			}
		}
	})
}
