package agui_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// The AG-UI door seen from outside: providers that speak the raw wire v4
// (nodetest.Prov: the real ticket and hello/welcome handshake over
// gorilla/websocket, not our SDK) and behave as a stranger's code may, and
// callers that are not each other.

// sendSeq sends one event frame carrying the provider's own seq (D7's
// extension).
func sendSeq(p *nodetest.Prov, runID string, seq int64, ev string) {
	p.Send(wire.Event{Type: wire.TypeEvent, RunID: runID, Event: json.RawMessage(ev), ProviderSeq: &seq})
}

// A provider that numbers its events from 0 (the wire gives seq no
// origin) has every event stored and relayed: its first one is not taken
// for a resend of an event nobody sent.
func TestOutsideProviderSeqFromZero(t *testing.T) {
	h, p, url := echoDoor(t)
	s := openStream(t, "POST", url, input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	evs := []string{
		runStartedFor(f),
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID),
	}
	for i, ev := range evs {
		sendSeq(p, f.RunID, int64(i), ev)
	}
	p.Finish(f.RunID)
	fs := s.rest()
	if got, want := typesOf(t, fs), []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}; !slices.Equal(got, want) {
		t.Fatalf("the caller saw %v, want %v", got, want)
	}
	if got := idsOf(fs); !slices.Equal(got, []string{"1", "2", "3", "4", "5"}) {
		t.Fatalf("ids %v: the provider's own RUN_STARTED was not stored", got)
	}
	h.WaitStatus(f.RunID, run.Completed)
	if n := len(h.Events(f.RunID)); n != len(evs) {
		t.Fatalf("%d events stored, want %d", n, len(evs))
	}
}
