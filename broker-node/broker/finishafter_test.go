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

// A report for a run whose lane is gone is told "the run has ended" when
// the reporting key serves the run's agent and this broker saw the run end
// (a resend after a takeover that ended it from its stored terminal
// event, a finish sent twice); any other key hears only "unknown run"
// (outside test F6: the run's own provider was told "unknown run").
func TestReportAfterTheEndNamesTheEnd(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	stranger := h.connect(0xe9, nil)
	stranger.register("other")
	id, thread := h.door(p.key, "echo", "hi")
	p.offer()
	p.accept(id)
	p.complete(id, thread)
	h.waitStatus(id, run.Completed)
	h.settle()
	p.finish(id)
	p.event(id, `{"type":"CUSTOM","name":"late","value":1}`)
	for _, kind := range []string{"finish", "event"} {
		if f := string(p.expect(wire.TypeError)); !strings.Contains(f, kind+" refused: the run has ended") {
			t.Fatalf("the run's provider heard %s", f)
		}
	}
	stranger.finish(id)
	if f := string(stranger.expect(wire.TypeError)); !strings.Contains(f, "finish refused: unknown run") {
		t.Fatalf("a stranger heard %s", f)
	}
}
