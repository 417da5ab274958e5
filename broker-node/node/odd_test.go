package node_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
)

// Odd frames a provider may send (funduq's own frame types, frames
// without a usable type, reports without a run id, wrong member types)
// are each answered with an error frame or a queryResult (D15), and the
// link stays open.
func TestOddFramesAreAnswered(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	for _, f := range []string{
		`{"type":"welcome"}`, `{"type":"run","runId":"run_x"}`, `{"type":"registered","names":[]}`,
		`{"type":"queryResult","queryId":"q"}`, `{"type":"cancel","runId":"run_x"}`, `{"type":"error","message":"x"}`,
		`{}`, `{"type":5}`, `{"type":null}`, `[]`, `null`, `"register"`, `42`, ``, `{"type":"register"}`,
		`{"type":"register","agents":{}}`, `{"type":"register","agents":[{}]}`, `{"type":"register","agents":[{"name":"a"}],"providerName":7}`,
		`{"type":"ack"}`, `{"type":"ack","runId":""}`, `{"type":"event","runId":"run_x","event":null}`, `{"type":"event","runId":"run_x","event":"RUN_STARTED"}`,
		`{"type":"finish"}`, `{"type":"deleteAgent","name":""}`, `{"type":"deleteAgent","name":7}`,
		`{"type":"query","queryId":7}`, `{"type":"query","queryId":"q"}`,
	} {
		p.SendRaw(f)
		typ, got := p.Next()
		if typ != wire.TypeError && typ != wire.TypeQueryResult {
			t.Errorf("%s answered %s", f, got)
		}
	}
	p.Register("a") // still open and usable
}
