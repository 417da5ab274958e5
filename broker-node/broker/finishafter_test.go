package broker

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A finish sent right behind an event the lane refuses is answered too:
// the refused event fails the run, and the finish that came with it in
// the same read is refused as every report behind the event is, never
// dropped (outside test F1: 4 of 4 such finishes got no frame back).
func TestLaneFinishBehindARefusedEventIsAnswered(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	p.offer()
	p.accept(id)
	p.event(id, started(id, thread))
	p.event(id, `{"type":"TEXT_MESSAGE_CONTENT","delta":"no messageId"}`)
	p.finish(id)
	h.waitStatus(id, run.Failed)
	var got []string
	for range 2 {
		got = append(got, string(p.expect(wire.TypeError)))
	}
	if !strings.Contains(got[0], "malformed") || !strings.Contains(got[1], "finish") {
		t.Fatalf("refusals %q, want the event's then the finish's", got)
	}
	p.none()
}
