package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Reproduction (outside test): the reason label of
// funduq_broker_reports_refused_total carried the validator's detail,
// which quotes what the provider sent, so each malformed event with a new
// role minted a new series and /metrics grew without bound. The label is
// the reason's fixed name; the detail still reaches the provider.
func TestRefusalLabelsDoNotQuoteTheProvider(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	for i := range 3 {
		id, _ := runWithBadEvent(h, p, i, fmt.Sprintf(`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"attacker-chosen-%d"}`, i))
		expectRefusal(t, p, id, "event refused: "+string(run.ReasonMalformedEvent)+": ")
	}
	h.Settle()
	m := metrics(t, h)
	if strings.Contains(m, "attacker-chosen") {
		t.Fatalf("a label quotes the provider:\n%s", grepLines(m, "refused"))
	}
	if !strings.Contains(m, `funduq_broker_reports_refused_total{kind="event",reason="`+string(run.ReasonMalformedEvent)+`"} 3`) {
		t.Fatalf("the three refusals are not one series:\n%s", grepLines(m, "refused"))
	}
}
