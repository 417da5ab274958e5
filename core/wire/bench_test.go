package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/funduq/funduq-go/core/wire"
)

// BenchmarkDecodeEvent is the broker's read of one event frame: the type
// peek and the decode, as the link's read loop does them.
func BenchmarkDecodeEvent(b *testing.B) {
	frame := []byte(`{"type":"event","runId":"run_000000000000000000000001","seq":7,"event":{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello there"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if typ, ok := wire.PeekType(frame); !ok || typ != wire.TypeEvent {
			b.Fatal("peek")
		}
		var f wire.Event
		if err := json.Unmarshal(frame, &f); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeRunFrame is the offer's run frame.
func BenchmarkEncodeRunFrame(b *testing.B) {
	input := json.RawMessage(`{"threadId":"thread_000000000000000000000001","runId":"run_000000000000000000000001","parentRunId":null,"state":null,"messages":[{"id":"msg_1","role":"user","content":"hi","name":null,"encryptedValue":null}],"tools":[],"context":[],"forwardedProps":{},"resume":null}`)
	thread := "thread_000000000000000000000001"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := wire.Marshal(wire.NewRunFrame(wire.DeliveredRun{RunID: "run_000000000000000000000001", AgentName: "echo",
			RunInput: input, ThreadID: &thread})); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeEventFrame is the same frame through DecodeProviderFrame,
// the link's own read: the type peek (which also checks the members'
// names, design.md §The provider wire) and the decode.
func BenchmarkDecodeEventFrame(b *testing.B) {
	frame := []byte(`{"type":"event","runId":"run_000000000000000000000001","seq":7,"event":{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello there"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := wire.DecodeProviderFrame(frame); err != nil {
			b.Fatal(err)
		}
	}
}
