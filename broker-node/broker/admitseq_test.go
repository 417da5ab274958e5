package broker

import (
	"encoding/json"
	"testing"
)

// Events repeating a seq within a batch (design.md D7): with the claim,
// whose write answers for no event, the batch's first event under the seq
// is the one stored and another event is refused here, a resend (the same
// JSON value, however written) kept for the store to skip. Past the claim
// nothing is refused here: the round's stored event under the seq decides,
// in the store — the batch's first event may be the one refused there and
// a later one the stored event's resend.
func TestAdmitRepeatedSeqs(t *testing.T) {
	l := &lane{b: &Broker{set: Settings{Limits: Limits{MaxEventBytes: 1 << 20, MaxEventsPerRun: 100}}}}
	one := int64(1)
	batch := []eventCmd{
		{ev: json.RawMessage(`{"type":"TEXT_MESSAGE_START","messageId":"m2","role":"assistant"}`), pseq: &one},
		{ev: json.RawMessage(`{"role":"assistant", "messageId":"m2","type":"TEXT_MESSAGE_START"}`), pseq: &one},
		{ev: json.RawMessage(`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`), pseq: &one},
	}
	if a := l.admit(batch, true); len(a.taken) != 1 || len(a.evs) != 2 || string(a.evs[1].Event) != string(batch[1].ev) {
		t.Errorf("with the claim: %d refused, kept %d events", len(a.taken), len(a.evs))
	}
	if a := l.admit(batch, false); len(a.taken) != 0 || len(a.evs) != 3 {
		t.Errorf("past the claim: %d refused, kept %d events", len(a.taken), len(a.evs))
	}
}
